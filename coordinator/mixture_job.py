"""A federated Gaussian-mixture job on the coordinator (FedEM, `models.mixture.fedem`).

    stats      as every detector job (`coordinator.detector_job`), plus each device's held-out count
    seed       every participant uploads the statistics of its own clusters; the server merges them
    train      rounds 2..R+1: a seeded sample uploads E-step statistics; incremental EM aggregates
    threshold  every participant sends a histogram of its held-out records' scores
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np

from coordinator.detector_job import DetectorJob
from coordinator.job_runner import Phase
from coordinator.support_proofs import SupportProofs
from models.core.aggregation import winsorized_weighted_mean
from models.core.messages import MessageType, Upload
from models.core.pipeline import close_round
from models.core.sampling import sample
from models.detection.preprocessing import Preprocessor
from models.detection.private import NoisySum
from models.detection.screening import Federation, WeightCaps, fleet_tail
from models.detection.threshold import EDGES, Tail
from models.mixture.detector import MixtureDetector
from models.mixture.fedem import FedEM, colluders, shared_of, standardised_moments
from models.mixture.messages import MixtureHistogram, MixtureRound, MixtureStatistics
from models.mixture.spec import MixtureJobSpec
from models.mixture.summed import GROW, WITHHELD, SummedFedEM, summed_scales
from models.private.dp import Noise

#: the most seeding rounds of a private job (as the simulator's `everyone_while`)
MAX_SEEDING = 64


class MixtureJob(SupportProofs, DetectorJob):
    type = "gmm"
    replies: ClassVar[dict[str, MessageType]] = {**DetectorJob.replies, "stats": MixtureStatistics, "seed": Upload,
                                                   "threshold": MixtureHistogram}
    stats_counts = ("held",)
    threshold_extras = ("nll",)

    spec: MixtureJobSpec
    tail: Tail | None = None  # set with the threshold, published with the model

    def algorithm(self) -> FedEM:
        if self.sums_only():  # the coordinator sees only sums: the devices hold their control variates (the job's
            # rounds and share sampled bound the swaps, as in plaintext: MixtureJobSpec.problem)
            alg = SummedFedEM(**self.spec.problem(), **self.spec.algorithm_params)
            if self.noisy() and "dp" in self.info:  # differential privacy's rounds (models.mixture.noisy)
                self.noisy_algorithm(alg)
            return alg
        return cast(FedEM, super().algorithm())

    # -- differential privacy (coordinator.noisy_detector): the seeding and EM rounds are noisy sums too -----------
    def noisy_algorithm(self, alg: SummedFedEM) -> Noise:
        """`alg` as the job's noise sets it (no swaps, the seeding's rounds, the clips, the mass floor); the noise of
        its rounds."""
        from models.mixture.noisy import noisy_rounds, plan

        plan(alg, int(self.info["dp"]["devices"]), self.spec.fraction, self.spec.rounds)
        return noisy_rounds(alg, self.ledger())

    def noise_plan(self, devices: int) -> tuple[dict[float, int], float]:
        from models.mixture.noisy import plan

        return plan(SummedFedEM(**self.spec.problem(), **self.spec.algorithm_params), devices, self.spec.fraction,
                    self.spec.rounds)

    def noisy_family(self) -> dict[str, NoisySum]:
        """The seeding's and the EM rounds' sums: each device's change of its contribution, clipped per name."""
        if "dp" not in self.info:  # (before the roll call: the order of the sums only)
            return {"seed": NoisySum({}, {}, {}), "train": NoisySum({}, {}, {})}
        from models.mixture.noisy import noisy_scales

        alg = self.algorithm()
        assert isinstance(alg, SummedFedEM)
        shapes = alg.upload_shapes(self.broadcast) if self.broadcast else {}
        scales = noisy_scales(alg)
        rounds = NoisySum(shapes, {k: scales[k] for k in shapes}, dict(alg.dp_clips))
        return {"seed": rounds, "train": rounds}

    def sampled_sum(self, name: str) -> bool:
        return name == "train"

    def start_noisy(self) -> None:
        self.server = dict(WeightCaps(1.0, 1.0).state())  # every device weighs 1 (its count is not released)
        self.start_private()

    def sum_label(self, name: str) -> str:
        """The label of the sum in progress (a device keeps the contribution it made for it until told it counted):
        a secure sum's, or a sum in the clear's job, name and round."""
        if self.in_clear():
            return f"{self.job_id}/{name}/{self.round}"
        return str(self.info["secagg"]["label"])

    def noisy_extra(self, name: str) -> dict[str, Any]:
        """A sum in the clear of the seeding or the EM rounds also tells its devices its label and the last sum
        whose total holds each one's change (`advertise_extra`)."""
        extra = super().noisy_extra(name)
        if name in ("seed", "train") and self.in_clear():
            extra["dp"].update(label=self.sum_label(name), counted=self.counted())
        return extra

    # -- private mode: the seeding grows from sums (every device, until it is done), then the sampled EM rounds,
    # each a secure sum of the devices' changes (models.mixture.summed), as the simulator runs them ---------------
    def start_private(self) -> None:
        alg = self.algorithm()
        assert self.rng is not None and isinstance(alg, SummedFedEM)
        caps = dict(self.server)
        self.server, broadcast = alg.init_server(len(self.participants), self.rng)
        self.server.update(caps)
        self.broadcast = alg.with_caps(self.server, broadcast)

    def next_sum(self, done: str) -> str | None:
        sums = self.info.get("sums", {})
        if done == "centred" or (done == "seed" and int(self.broadcast["stage"]) == GROW
                                 and sums.get("seed", 0) < MAX_SEEDING):
            return "seed"
        if done in ("seed", "train"):
            if sums.get("train", 0) < self.spec.rounds:
                return "train"
            return "anchor" if self.noisy() else "window"
        return super().next_sum(done)

    def sum_members(self, name: str) -> list[str]:
        if name != "train":
            return self.participants
        assert self.rng is not None
        return [self.participants[i] for i in sample(self.rng, self.participants, self.spec.fraction)[0]]

    def announce_family(self, name: str) -> tuple[dict[str, tuple[int, ...]], dict[str, float], int]:
        from models.private.fixedpoint import BITS

        alg = self.algorithm()
        assert isinstance(alg, SummedFedEM)
        shapes = alg.upload_shapes(self.broadcast)
        scales = summed_scales(float(max(self.counts)), alg.splits)
        return shapes, {k: scales[k] for k in shapes}, BITS

    def announce(self, name: str, rnd: int, members: list[str]) -> Any:
        announced = super().announce(name, rnd, members)
        return self.with_limbs(announced) if self.proves(name) else announced

    def validate_step(self, msg: Any, sender: str) -> None:
        super().validate_step(msg, sender)
        from models.private.messages import Advertised

        if isinstance(msg, Advertised):
            self.check_proofs(msg, sender)

    def keep_advertised(self, name: str, replies: dict[int, Any]) -> None:
        self.keep_commitments(name, replies)

    def summed_family(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        """The server step on the round's sum (the pipeline's stages and rules, as every round), its support changes
        checked first against the devices' commitments if the job proves them (coordinator.support_proofs)."""
        index = self.index()
        alg = self.algorithm()
        assert isinstance(alg, SummedFedEM)
        total = self.check_sum(name, total, members, index, alg.components * alg.split_factor)
        withheld = WITHHELD in total
        ids = np.array([index[m] for m in members], dtype=np.int64)
        self.server, self.broadcast = close_round(alg, self.server, ids, total,
                                                  np.array(self.counts, dtype=float)[ids])
        counted = self.info.setdefault("counted", {})
        for m in members:  # the sum holds their changes: each device commits its new contribution when told
            counted[m] = self.sum_label(name)
        return {"stage": int(self.broadcast["stage"]), **({"support_withheld": 1} if withheld else {})}

    def advertise_extra(self, name: str) -> dict[str, Any]:
        """A seeding or EM sum tells each of its devices the last sum whose total holds its change: the device keeps
        the contribution it made then (its control variate), or, if its upload did not count (it left before
        uploading, or the sum failed), the one before."""
        if name not in ("seed", "train"):
            return super().advertise_extra(name)
        counted = self.counted()
        return {**super().advertise_extra(name), "counted": counted, "withheld": self.withheld_labels(counted)}

    def counted(self) -> dict[str, str]:
        """For each device of the sum in progress, the label of the last sum whose total holds its change."""
        counted = self.info.get("counted", {})
        return {n: counted[n] for n in self.sampled if n in counted}

    def histogram_records(self) -> np.ndarray:
        return np.asarray(self.info["held"], dtype=float)

    def private_holdout(self) -> float:
        return float(self.spec.holdout)

    def threshold_winsor(self) -> tuple[float, int]:
        return float(self.spec.device_trim), colluders(self.algorithm().min_support)

    round_message = MixtureRound

    def round_fields(self) -> dict[str, Any]:
        return {"holdout": self.spec.holdout, "seed": self.spec.seed}

    def start_algorithm(self, fed: Federation, counts: np.ndarray, total: np.ndarray, sumsq: np.ndarray) -> None:
        alg = self.algorithm()
        assert self.rng is not None
        self.server, self.broadcast = alg.init_server(len(counts), self.rng)
        self.server = alg.attach_bounds(self.server, *standardised_moments(counts, total, sumsq, fed.mean, fed.scale))

    def phase_table(self) -> list[Phase]:
        """The statistics, a seeding round (every participant's own clusters), the EM rounds, the threshold."""
        return [Phase("stats"), Phase("seed"), Phase("train", self.spec.rounds, sampled=True), Phase("threshold")]

    def expected_upload(self) -> dict[str, tuple[int, ...]]:
        alg = self.algorithm()
        return {"R": (alg.components,), "S1": (alg.components, alg.n_features), "S2": (alg.components, alg.packed)}

    def round_metrics(self, before: dict[str, np.ndarray]) -> dict[str, Any]:
        weights = self.broadcast["pi"]
        out = {**super().round_metrics(before), "stage": ["seeding", "em", "k-means"][int(self.broadcast["stage"])],
               "components_used": int(np.count_nonzero(weights > 1e-4)),
               "mean_shift": float(np.abs(self.broadcast["means"] - before["means"]).max())}
        alg = self.algorithm()
        if "H_rows" in self.server and "shared" in self.broadcast and isinstance(alg, FedEM):
            kept_out = self.kept_out(alg)
            if kept_out:
                out.setdefault("influence", {})["kept_out"] = kept_out
            # components enough devices support but a few hold most of the mass of (the mass share): counted,
            # not put on any device
            out["components_owned_by_few"] = alg.mass_kept_out(self.server, np.asarray(self.broadcast["shared"]) > 0.5)
        return out

    def kept_out(self, alg: FedEM) -> dict[str, str]:
        """This round's devices whose own traffic forms components too few devices support (the support rule,
        models.mixture.fedem.shared_components): those stay out of the fleet's model, personal to the devices
        holding them. An honest device with unusual traffic shows here too; one that shows round after round
        while few others do is what the operator looks at (store.jobs.influence)."""
        index = self.index()
        names = [n for n in self.pending if self.server["slot"][index[n]] > 0]
        rows = np.array([int(self.server["slot"][index[n]]) - 1 for n in names], dtype=np.int64)
        blamed: list[int] = alg.kept_out(self.server, rows).tolist() if len(rows) else []
        out = {}
        for name, alone in zip(names, blamed):
            if alone:
                out[name] = (f"{int(alone)} of its components too few devices support (the support rule): kept out "
                             "of the shared model, its own")
        return out

    def histogram_count(self, sender: str) -> float:
        return float(self.info["held"][self.index()[sender]])

    def model_info(self, answered: list[str], weights: np.ndarray) -> dict[str, Any]:
        """The held-out records' mean negative log-likelihood (the devices' means, a winsorised weighted mean):
        what compares mixtures without labels (lower is better), e.g. jobs with different components."""
        nll = np.array([float(self.pending[a].nll[0]) for a in answered])
        held = np.array([self.info["held"][self.index()[a]] for a in answered]) > 0
        if not held.any():
            return {}
        value = winsorized_weighted_mean(nll[held, None], weights[held], self.spec.device_trim)[0]
        return {"holdout_nll": float(value)}

    def threshold_from(self, histograms: list[tuple[np.ndarray, np.ndarray]], weights: np.ndarray) -> float:
        """The fleet's threshold, and the tail each device shrinks its own threshold toward it with."""
        threshold, self.tail = fleet_tail(histograms, weights, self.spec.quantile, self.spec.device_trim,
                                          self.spec.holdout, colluders(self.algorithm().min_support))
        return threshold

    def detector(self, pre: Preprocessor, threshold: float) -> MixtureDetector:
        if int(self.broadcast["stage"]) == 0:
            raise ValueError("no device answered the seeding round: there is no mixture")
        if not EDGES[0] < threshold < EDGES[-1]:
            raise ValueError(f"threshold {threshold!r} outside the score grid ({EDGES[0]:g}..{EDGES[-1]:g})")
        return MixtureDetector.from_model(self.algorithm().consensus(self.broadcast), pre, threshold,
                                          shared_of(self.broadcast), self.tail, quantile=self.spec.quantile,
                                          reg=self.algorithm().reg)
