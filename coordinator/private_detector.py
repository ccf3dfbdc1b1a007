"""A detector job in private mode on the coordinator (issue 23): it learns the fleet's sums, never one device's
statistics. The phases are the simulator's (models.detection.private), each sum a secure sum over MQTT
(coordinator.secure_sums):

    stats      every participant sends its record count (and held-out count) in the clear: the weight caps
    mean       secure sum of each device's capped weight times its mean of log-scaled records, and its weight
    centred    secure sum of each device's weighted mean square around the fleet's mean: the standardisation
    (family)   the family's sums (PCA: every device's weighted second moment, once)
    window     secure sum of each device's weighted shares above the coarse grid's edges, and of its 0/1 rows of the
               tail levels they reach: where the tail lies, and the bound each device clips its shares above to
               (models.detection.tail_clip)
    threshold  secure sum of each device's clipped histogram statistics over that window: the fleet's threshold and
               tail

The job trains on numeric features, every one log-scaled (as the simulator's private mode), and builds the model
version as a plaintext job does.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from coordinator.noisy_detector import CLEAR, NoisyDetector
from coordinator.secure_sums import SecureSums, step_of
from models.core.messages import MessageType, Upload
from models.detection.messages import Counted
from models.detection.preprocessing import Preprocessor
from models.detection.private import (
    CENTRED_SCALES,
    MEAN_SCALES,
    STATS_BITS,
    fleet_mean,
    fleet_standardisation,
    largest_weight,
    tail_bounds,
    tail_from,
    tail_scales,
    tail_window,
    window_scales,
    window_shapes,
)
from models.detection.screening import weight_caps
from models.private.relay import STEPS
from wire.protocol import ProtocolError


class PrivateDetector(SecureSums, NoisyDetector):
    """The private-mode half of `coordinator.detector_job.DetectorJob` (used when the job's `private` is set)."""

    spec: Any  # models.detection.spec.DetectorJobSpec
    round_message: ClassVar[Any]
    tail: Any = None  # the fleet's tail (models.detection.threshold.Tail), with the threshold

    def round_fields(self) -> dict[str, Any]:
        """The fields the family's round message adds to the detector's."""
        return {}

    # -- what a family adds ---------------------------------------------------------------------------
    def family_sums(self) -> list[str]:
        """The secure sums of the family's own, between the standardisation and the threshold."""
        return []

    def announce_family(self, name: str) -> tuple[dict[str, tuple[int, ...]], dict[str, float], int]:
        """(shapes, scales, ring bits) of one of the family's sums."""
        raise NotImplementedError

    def summed_family(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def start_private(self) -> None:
        """Set up the family's server state and broadcast once the counts are known (the caps in self.server)."""

    def histogram_records(self) -> np.ndarray:
        """How many records each participant histograms in the threshold phase (its training records)."""
        return np.asarray(self.counts, dtype=float)

    # -- the phases -----------------------------------------------------------------------------------
    def next_sum(self, done: str) -> str | None:
        """The secure sum after `done` ("stats": the statistics phase), None after the last (`info["sums"]` counts
        those done)."""
        if self.noisy():
            return self.noisy_next(done)
        order = ["mean", "centred", *self.family_sums(), "window", "threshold"]
        i = order.index(done) + 1 if done in order else 0
        return order[i] if i < len(order) else None

    def lists_devices(self) -> bool:
        """A sum's round names its members (a secure sum's members exchange keys; its list grows with the fleet)."""
        return self.sums_only()

    def sum_members(self, name: str) -> list[str]:
        """The devices asked to the secure sum `name` (every participant; a family's sampled rounds fewer)."""
        return self.participants

    def private_follow(self) -> None:
        """The next step of the sum in progress, else a failed sum again, else the first step of the next sum, else the
        end."""
        if self.next_step():
            return
        at = step_of(self.phase)
        nxt = self.next_sum(at[0] if at is not None else self.phase)
        if nxt is None:
            self.finish()
        else:  # a sum in the clear (central noise) is one round; a secure sum's first step
            self.begin(f"{nxt}:{CLEAR if self.in_clear() else STEPS[0]}", self.round + 1, self.sum_members(nxt))

    def sums_only(self) -> bool:
        """The job learns sums (private mode, or differential privacy): the phases are this class's."""
        return bool(self.spec.private) or self.noisy()

    def in_clear(self) -> bool:
        """Differential privacy without private mode: each sum collected in the clear, the coordinator adds the
        noise (coordinator.noisy_detector)."""
        return self.noisy() and not self.spec.private

    def asked(self, phase: str) -> list[str]:
        at = step_of(phase)
        return self.participants if at is not None and at[1] == CLEAR else super().asked(phase)

    def private_reply(self, phase: str) -> MessageType | None:
        if phase == "stats":
            return Counted
        at = step_of(phase)
        return Upload if at is not None and at[1] == CLEAR else SecureSums.reply_type(self, phase)

    def private_content(self, phase: str, header: dict[str, Any]) -> Any:
        d = len(self.spec.features)
        common = {**header, "params": self.spec.algorithm_params, "rank": self.spec.rank, "log_transform": True,
                  "features": self.spec.features, "private": bool(self.spec.private), "dp": self.noisy(),
                  **self.round_fields()}
        if phase == "stats":
            return self.round_message(**common)
        mean, scale = self.info.get("mean"), self.info.get("scale")
        return self.round_message(**common, log_mask=[1] * d, broadcast=dict(self.broadcast),
                                  mean=None if mean is None else np.array(mean),
                                  scale=None if scale is None else np.array(scale),
                                  weights=self.weights(self.sampled)[1], **self.sum_fields(phase))

    def sum_fields(self, phase: str) -> dict[str, Any]:
        """What a sum's round message carries: a secure sum's step, or the announcement of a sum in the clear."""
        at = step_of(phase)
        if at is not None and at[1] == CLEAR:
            return {"noisy": self.noisy_extra(at[0])["dp"]}
        return self.secure_fields(phase)

    def private_validate(self, msg: Any, sender: str) -> None:
        if isinstance(msg, Counted):
            for k in ("count", "held"):
                v = getattr(msg, k)
                if v is not None and (v.shape != (1,) or not 0 <= float(v[0]) <= self.spec.max_records):
                    raise ProtocolError("value", f"{k} must be one count between 0 and {self.spec.max_records}")
            if float(msg.count[0]) < 1:
                raise ProtocolError("value", "a device with no training records cannot take part")
            return
        if isinstance(msg, Upload):
            self.validate_clear(msg)
            return
        self.validate_step(msg, sender)

    def private_close(self, answered: list[str]) -> dict[str, Any]:
        if self.phase == "stats":
            return self.private_stats(answered)
        at = step_of(self.phase)
        if at is not None and at[1] == CLEAR:
            return self.close_clear(at[0], answered)
        return self.close_step(answered)

    def private_stats(self, answered: list[str]) -> dict[str, Any]:
        """The counts: the participants, their weight caps (a device weighs itself with them) and the sums' clip."""
        if len(answered) < 2:
            self.fail(f"{len(answered)} agents answered the statistics phase; private mode sums at least 2")
            return {}
        self.participants = answered
        if self.noisy():  # a roll call: every device weighs 1, no count is kept
            return self.noisy_roll_call(answered)
        counts = np.array([float(self.pending[a].count[0]) for a in answered])
        self.counts, self.roster_saved = counts.tolist(), False
        caps = weight_caps(counts, self.spec.guard())
        d = len(self.spec.features)
        self.info = {"features": list(self.spec.features), "log_mask": [1] * d, "encoding": None,
                     "clip": largest_weight(caps, counts)}
        held = [self.pending[a].held for a in answered]
        if all(h is not None for h in held):
            self.info["held"] = [float(h[0]) for h in held]
        self.rng = np.random.default_rng(self.spec.seed)
        self.server = dict(caps.state())
        self.broadcast = {}
        self.start_private()
        return {"records": int(counts.sum())}

    def noisy_roll_call(self, answered: list[str]) -> dict[str, Any]:
        """A job with differential privacy: its participants, each weighing 1, and its noise calibrated."""
        self.counts, self.roster_saved = [1.0] * len(answered), False
        d = len(self.spec.features)
        self.info = {"features": list(self.spec.features), "log_mask": [1] * d, "encoding": None, "clip": 1.0}
        self.rng = np.random.default_rng(self.spec.seed)
        self.server, self.broadcast = {}, {}
        try:
            self.calibrate_noise(len(answered))
        except ValueError as e:  # the budget out of reach, or the accountant not installed
            self.fail(f"differential privacy: {e}")
            return {}
        self.start_noisy()
        return {"noise_multiplier": self.info["dp"]["multiplier"]}

    def start_noisy(self) -> None:
        """Set up the family's server state and broadcast once the noise is calibrated (every device weighs 1)."""

    def announce(self, name: str, rnd: int, members: list[str]) -> Any:
        from models.private.fixedpoint import BITS
        from models.private.relay import Announced

        d = len(self.spec.features)
        seed = int(np.random.default_rng([self.spec.seed, rnd]).integers(2**31))
        if self.noisy():
            shapes, scales, clip, bits = self.noisy_announced(name, members)
            return Announced(f"{self.job_id}/{name}/{rnd}", tuple(members), shapes, dict(scales), clip, bits, seed)
        if name == "mean":
            shapes, scales, bits = {"m1": (d,), "w": ()}, MEAN_SCALES, STATS_BITS
        elif name == "centred":
            shapes, scales, bits = {"c2": (d,)}, CENTRED_SCALES, STATS_BITS
        elif name == "window":
            clipped = self.threshold_winsor() is not None
            shapes = window_shapes(self.spec.quantile if clipped else None)
            scales, bits = {k: v for k, v in window_scales().items() if k in shapes}, BITS
        elif name == "threshold":
            lo, hi = self.info["window"]
            shapes = {**{k: (hi - lo,) for k in ("c", "wa", "wa2", "na")}, "w": (), "wn": (), "n": ()}
            scales, bits = tail_scales(max(float(self.histogram_records().max()), 1.0)), BITS
        else:
            shapes, scales, bits = self.announce_family(name)
        return Announced(f"{self.job_id}/{name}/{rnd}", tuple(members), shapes, dict(scales),
                         float(self.info["clip"]), bits, seed)

    def advertise_extra(self, name: str) -> dict[str, Any]:
        """A noisy sum's noise; the window's quantile (the tail's levels); the threshold's window (the fine bins its
        devices histogram) and the bounds each device clips its shares above to."""
        if self.noisy():
            return self.noisy_extra(name)
        if name == "window":
            return {} if self.threshold_winsor() is None else {"quantile": float(self.spec.quantile)}
        if name != "threshold":
            return {}
        bounds = self.info.get("bounds")
        return {"window": list(self.info["window"]), **({} if bounds is None else {"bounds": list(bounds)})}

    def summed(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        if self.noisy():
            from models.private.relay import Announced

            return self.noisy_summed(name, total, len(Announced.from_meta(self.info["secagg"]).names), members)
        if name == "mean":
            mean, W = fleet_mean(total)
            self.info.update(mean=mean.tolist(), W=W)
            return {"weight": W}
        if name == "centred":
            pre = fleet_standardisation(self.spec.features, np.array(self.info["mean"]), total, self.info["W"])
            self.info["scale"] = pre.scale.tolist()
            return {}
        if name == "window":
            winsor = self.threshold_winsor()
            bounds = None if winsor is None else tail_bounds(total, self.spec.quantile, *winsor)
            self.info["window"] = list(tail_window(total, self.spec.quantile, bounds, self.least_weight()))
            self.info["bounds"] = None if bounds is None else bounds.tolist()
            return {"window": self.info["window"]}
        if name == "threshold":
            threshold, self.tail = tail_from(total, tuple(self.info["window"]), self.spec.quantile,
                                             self.private_holdout())
            self.store_model(self.standardisation(), threshold, {})
            return {"threshold": threshold}
        return self.summed_family(name, total, members)

    def private_holdout(self) -> float:
        """The share of records a device holds out for its threshold (0: all of them, PCA)."""
        return 0.0

    def threshold_winsor(self) -> tuple[float, int] | None:
        """The trim and colluders of the threshold's clip (models.detection.tail_clip), as the family's simulator
        has them (None: no clip, PCA's: models.pca.private)."""
        return None

    def least_weight(self) -> float:
        """The smallest weight of a participant holding records for the threshold (the window's lower end)."""
        counts = np.asarray(self.counts, dtype=float)
        w = weight_caps(counts, self.spec.guard()).apply(counts)[self.histogram_records() > 0]
        return float(w.min()) if len(w) else 0.0

    def standardisation(self) -> Preprocessor:
        d = len(self.spec.features)
        return Preprocessor(list(self.spec.features), np.ones(d, bool), np.array(self.info["mean"]),
                            np.array(self.info["scale"]))

    def store_model(self, pre: Preprocessor, threshold: float, extra: dict[str, Any]) -> None:
        raise NotImplementedError
