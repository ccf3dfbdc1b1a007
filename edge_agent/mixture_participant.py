"""An agent's part in a federated Gaussian-mixture job (FedEM, `models.mixture.fedem`).

The device holds out a share of its training records (`models.detection.threshold.holdout_mask`, the job's
``holdout``): the mixture is fitted on the rest, the threshold histogram is of the held-out records' scores.
``seed`` (every participant, once): the statistics of its own clusters; ``train``: E-step statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from edge_agent.participant import Request
from edge_agent.sources import take_rows
from models.core.messages import Upload
from models.detection.preprocessing import Preprocessor
from models.detection.threshold import holdout_mask
from models.mixture.detector import MixtureDetector
from models.mixture.fedem import FedEM, device_seed, shared_of
from models.mixture.messages import MixtureHistogram, MixtureRound, MixtureStatistics
from wire.protocol import Envelope

#: a private job with support proofs (models.private.proven): the device's proven row (its values and blinding
#: factors) kept with its contribution, the one before it (back if the sum is withheld), and the commitments and
#: proofs its advertisement carries
ROW, ROW_BLINDINGS, KEPT_ROW, KEPT_BLINDINGS = "proof.values", "proof.blindings", "proof.kept", "proof.kept.blindings"
COMMITMENTS, PROOFS = "proof.commitments", "proof.proofs"


class MixtureParticipant(DetectorParticipant[MixtureRound]):
    family = "gmm"
    round_message = MixtureRound
    statistics = MixtureStatistics
    histogram = MixtureHistogram

    def problem(self, msg: MixtureRound) -> dict[str, int]:
        return {"n_features": len(msg.features)}

    def algorithm(self, msg: MixtureRound) -> FedEM:
        if msg.private or msg.dp:  # the coordinator sees only sums: this device keeps its own control variate
            from models.mixture.summed import SummedFedEM

            summed = SummedFedEM(len(msg.features), **msg.params)
            summed.dp_clips = summed.announced_clips(msg.broadcast or {})  # differential privacy's, if any
            return summed
        alg = super().algorithm(msg)
        if not isinstance(alg, FedEM):
            raise TypeError(f"{type(alg).__name__} is not FedEM")
        return alg

    def phases(self) -> dict[str, Callable[[Request], Envelope | None]]:
        return {**super().phases(), "seed": self._seed}

    def _held(self, msg: MixtureRound) -> np.ndarray:
        return holdout_mask(len(self.buffer.X), float(msg.holdout))

    def training_rows(self, msg: MixtureRound) -> np.ndarray:
        return ~self._held(msg)

    def stats_extra(self, msg: MixtureRound) -> dict[str, np.ndarray]:
        return {"held": np.array([int(self._held(msg).sum())], dtype=np.int64)}

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        msg: MixtureRound = req.msg
        X = np.empty(1, dtype=object)
        # this device's position among the participants (the seeding round lists all of them, in order), or its id
        # when rounds list nobody (models.core.sampling)
        who = self.id if msg.draw() is not None else msg.sampled.index(self.id)
        data = {"X": X, "seed": np.array([device_seed(int(msg.seed), who)])}
        X[0] = self.standardised(msg)  # as RECORD_DTYPE, as the simulator's devices hold them (device_data)
        if not (msg.private or msg.dp):
            return data
        return {**data, "claimed": np.array([float(len(X[0]))])}  # private mode: the records it claimed (its weight)

    def secure_family_values(self, name: str, req: Request, w: np.ndarray) -> dict[str, np.ndarray]:
        """A private job's seeding and EM rounds: the summed FedEM's client step (the simulator's), whose upload is
        the change of this device's contribution; its new contribution kept (its control variate)."""
        if name not in ("seed", "train"):
            return super().secure_family_values(name, req, w)
        return self.proven(req, self.summed_step(req))

    def proven(self, req: Request, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A sum with support proofs (its announcement names the limbs, models.private.proven): this device's kept
        row (with the job's merges it has not made) and the support change it masks, committed and proven as the
        simulator's devices prove them; the blinding change joins its masked values as limbs, and the row it keeps
        once the sum counts it waits with the contribution kept aside (`keep_pending`)."""
        from models.private import bitproofs as bp
        from models.private.fixedpoint import Ring
        from models.private.proven import as_rows, limbs_name, merged_row, prove_change, row_arrays, row_of
        from models.private.relay import Announced

        announced = Announced.from_meta(req.msg.secagg)
        if limbs_name("dH") not in announced.shapes:
            return values
        try:
            import nacl  # noqa: F401
        except ImportError:  # declined, saying what to install (as private mode's own extra)
            raise ValueError("this job proves its support rows (support_proofs), which needs PyNaCl: pip install "
                             "'fedsentry[private]' on this device") from None
        old, _ = self.load_state(req.job)  # the contribution the sums hold (`counted_state` committed it)
        pending, label = self.pending_state(req.job)
        if old is not None and ROW in old:
            row = row_of(old[ROW][0], old[ROW_BLINDINGS][0])
            pairs = np.asarray(req.msg.broadcast.get("merges", np.zeros((0, 2))), dtype=np.int64).reshape(-1, 2)
            row = merged_row(row, pairs[int(old["merged"][0]):].tolist())
        else:
            row = bp.SecretRow.empty(len(pending["H"][0]))
        answer, after = prove_change(row, values["dH"], bp.context(req.job, announced.label, self.id))
        kept, new = row_arrays(row), row_arrays(after)
        self.keep_pending(req.job, {
            **pending, ROW: new["values"][None], ROW_BLINDINGS: new["blindings"][None],
            KEPT_ROW: kept["values"][None], KEPT_BLINDINGS: kept["blindings"][None],
            COMMITMENTS: as_rows(answer.commitments, bp.POINT_BYTES)[None],
            PROOFS: as_rows(answer.proofs, bp.PROOF_BYTES)[None]}, label)
        ring = Ring.for_sum(announced.clip, len(announced.names), announced.bits)
        return {**values, limbs_name("dH"): bp.limb_values(answer.blinding_change, ring)}

    def advertised(self, req: Request, msg: Any) -> Any:
        """The advertisement of a sum with support proofs carries the row's commitments and bit proofs (`proven`)."""
        pending, label = self.pending_state(req.job)
        if COMMITMENTS not in pending or label != (req.msg.secagg or {}).get("label"):
            return msg
        return replace(msg, commitments=pending[COMMITMENTS][0], proofs=pending[PROOFS][0])

    def noisy_family_values(self, name: str, req: Request) -> dict[str, np.ndarray]:
        """A job with differential privacy: the seeding and EM rounds' change of this device's contribution (its
        weight 1, each change clipped to the clips the broadcast announces), as in private mode."""
        if name not in ("seed", "train"):
            return super().noisy_family_values(name, req)
        return self.summed_step(req)

    @staticmethod
    def announcement(req: Request) -> dict:
        """The sum's announcement: a secure sum's, or a sum in the clear's (coordinator.noisy_detector)."""
        meta = req.msg.secagg if req.msg.secagg is not None else req.msg.noisy
        if meta is None or "label" not in meta:
            raise ValueError(f"the {req.msg.phase} round does not carry its sum's label")
        return meta

    def summed_step(self, req: Request) -> dict[str, np.ndarray]:
        """The summed FedEM's client step (the simulator's), whose upload is the change of this device's
        contribution; its new contribution kept (its control variate)."""
        alg, data = self.algorithm(req.msg), self.client_data(req)
        state = self.counted_state(req)
        if state is None:
            state = alg.init_clients(data, req.msg.broadcast)
        new, upload = alg.client_update(state, data, req.msg.broadcast)
        # kept aside until a later sum says this one holds its change (`counted_state`)
        self.keep_pending(req.job, new, str(self.announcement(req)["label"]))
        return {k: v[0] for k, v in upload.items()}

    def counted_state(self, req: Request) -> dict[str, np.ndarray] | None:
        """This device's contribution as the coordinator's sums hold it: the one it made for the last sum whose
        total holds its change (the round message says which), committed now; one whose upload did not count is
        dropped (the device left before uploading, or the sum failed)."""
        meta = self.announcement(req)
        withheld = set(meta.get("withheld", []))

        def finish(state: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
            """A sum whose support change was withheld (its check failed): the row as the sums hold it, the kept
            one, and the proven row before it (models.mixture.summed.WITHHELD, as the simulator's devices)."""
            if label not in withheld:
                return state
            from models.mixture.summed import WITHHELD  # private jobs only: a scoring agent never loads it

            state = self.algorithm(req.msg).client_finish(state, {WITHHELD: np.ones(1)})
            if KEPT_ROW in state:
                state = {**state, ROW: state[KEPT_ROW], ROW_BLINDINGS: state[KEPT_BLINDINGS]}
            return state

        self.commit_counted(req.job, meta.get("counted"), False, finish)
        state, _ = self.load_state(req.job)
        return state

    def _seed(self, req: Request) -> Envelope:
        """The statistics of this device's own clusters (the algorithm's client step on the seeding broadcast)."""
        alg = self.algorithm(req.msg)
        data = self.client_data(req)
        _, upload = alg.client_update(alg.init_clients(data, req.msg.broadcast), data, req.msg.broadcast)
        return req.reply(Upload(arrays={k: v[0] for k, v in upload.items()}), self.id)

    def threshold_extras(self, msg: MixtureRound, errors: np.ndarray) -> dict[str, np.ndarray]:
        """The held-out records' mean negative log-likelihood (scores are NLL minus the mixture's floor)."""
        floor = self.algorithm(msg).consensus(msg.broadcast).floor()
        return {"nll": np.array([float(np.mean(errors)) + floor if len(errors) else 0.0])}

    def threshold_errors(self, msg: MixtureRound, pre: Preprocessor) -> np.ndarray:
        """The held-out records' scores under the fleet's components and this device's own (those its records fall
        in: models.mixture.detector.personalise), as it will score its traffic."""
        det = MixtureDetector.from_model(self.algorithm(msg).consensus(msg.broadcast), pre, 1.0,
                                         shared_of(msg.broadcast))
        batch = self.buffer.batch()  # the records it trained on, as the agent personalises when it loads the model
        rows = np.flatnonzero(self.training_rows(msg))
        det.personalise(self.columns(take_rows(batch, rows[i: i + 4096]), msg)
                        for i in range(0, len(rows), 4096))
        return np.asarray(det.score_samples(self.columns(take_rows(self.buffer.batch(), self._held(msg)), msg)))
