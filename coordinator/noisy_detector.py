"""Differential privacy in a private detector job on the coordinator (issue 23, point 4): the simulator's noisy sums
(models.detection.private.noisy_sums, a family's own between them) run as secure sums over MQTT, each device adding
its share of the Gaussian noise before masking (distributed noise, models.private.dp), accounted by
`dp-accounting` (models.private.accounting) on the coordinator.

    stats      a roll call: every device answers (it weighs 1, its count is not released)
    mean       secure sum of each device's clipped mean of log-scaled records, with its noise share
    centred    its clipped mean square around the fleet's noisy mean: the standardisation
    (family)   the family's noisy sums (PCA: every device's clipped second moment)
    anchor     each device's shares of its scores on a coarse grid: where the fleet's tail is
    threshold  each device's exceedances at candidates around the anchor: the threshold

The advertise step of each sum announces, in the round message's `secagg` meta (`dp`), what a device needs to add its
share: the noise multiplier, each statistic's clip, the sum's index in the job and (threshold) the anchor and the
quantile. A device draws its share from a stream keyed by its own secret and that index (models.private.dp.Noise.
device_share): a sum asked again (a failed attempt, a coordinator restarted) carries the same noise; the coordinator
never draws or sees any. The multiplier is calibrated once, for the job's planned sums, when the roll call closes,
and saved with the job's state (`info["dp"]`) with how many noisy sums it released; the budget spent is stored with
the model version (`dp`, as `fedsentry simulate`'s JSON) and shown by the API's job detail.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from models.core.messages import Upload
from models.detection.private import NoisySum, anchor_of, noisy_job, noisy_standardisation, noisy_threshold
from models.private.dp import Ledger, Noise, fewest_uploads
from wire.protocol import ProtocolError

#: the step of a sum collected in the clear (central noise): its phase is "<sum>:clear", one round
CLEAR = "clear"


def central_key() -> list[int]:
    """The secret key of a job's central noise: drawn once from the system's entropy when the roll call closes, and
    kept in the job's saved state (never in what the API shows)."""
    import secrets

    return [secrets.randbits(32) for _ in range(4)]


class NoisyDetector:
    """The differential-privacy half of `coordinator.private_detector.PrivateDetector` (a job with `dp_epsilon`)."""

    spec: Any
    info: dict[str, Any]
    participants: list[str]
    phase: str
    pending: dict[str, Any]

    def noisy(self) -> bool:
        return self.spec.dp_epsilon is not None

    # -- what a family adds ---------------------------------------------------------------------------
    def noisy_family(self) -> dict[str, NoisySum]:
        """The family's own noisy sums, by name, in order (PCA: the second moments)."""
        return {}

    def noise_plan(self, devices: int) -> tuple[dict[float, int], float]:
        """How many noisy sums the job releases at each sampling rate (the budget is calibrated for them) over
        `devices` devices, and its sampled sums' rate (PCA: every sum of every device)."""
        return {1.0: len(self.noisy_table())}, 1.0

    def sampled_sum(self, name: str) -> bool:
        """Whether the noisy sum `name` is of a sampled share of the devices (a mixture's EM rounds)."""
        return False

    # -- the sums -------------------------------------------------------------------------------------
    def noisy_table(self) -> dict[str, NoisySum]:
        """Every noisy sum of the job, in the order they run."""
        return noisy_job(len(self.spec.features), self.spec.quantile, self.noisy_family())

    def noisy_next(self, done: str) -> str | None:
        order = list(self.noisy_table())
        i = order.index(done) + 1 if done in order else 0
        return order[i] if i < len(order) else None

    def calibrate_noise(self, devices: int) -> None:
        """The noise multiplier for the job's planned sums over `devices` devices (once, when the roll call
        closes; saved with the job's state)."""
        from models.private.accounting import Budget, calibrate, planned

        budget = Budget(self.spec.dp_epsilon, self.spec.dp_delta)
        plan, q = self.noise_plan(devices)
        multiplier = calibrate(budget.epsilon, budget.delta, planned(plan))
        self.info["dp"] = {"multiplier": multiplier, "devices": devices, "fraction": q,
                           "plan": [[rate, count] for rate, count in plan.items()], "released": 0, "sampled": 0,
                           "taken": {}, "clipped": 0}
        if not self.spec.private:  # central noise: the coordinator's generator, saved after every sum it noises
            self.info["dp"]["rng"] = np.random.default_rng(central_key()).bit_generator.state

    def ledger(self) -> Ledger:
        """The job's noise as saved: the multiplier, where it is added, the sums released (each at its rate, and
        how many sampled sums each device answered), and with central noise the coordinator's generator where the
        last sum left it."""
        state = self.info["dp"]
        q, sampled = float(state["fraction"]), int(state["sampled"])
        ledger = Ledger(float(state["multiplier"]), bool(self.spec.private), int(state["devices"]), q,
                        {float(rate): int(count) for rate, count in state["plan"]},
                        released=[1.0] * (int(state["released"]) - sampled) + [q] * sampled,
                        taken=Counter({int(i): int(n) for i, n in state["taken"].items()}),
                        clipped=int(state["clipped"]))
        if "rng" in state:
            ledger.rng.bit_generator.state = state["rng"]
        return ledger

    def keep(self, ledger: Ledger) -> None:
        """Save what a sum changed of the job's noise: the sums released, each device's sampled sums, the uploads
        clipped, the central generator."""
        state = self.info["dp"]
        state.update(released=len(ledger.released), sampled=len(ledger.released) - ledger.released.count(1.0),
                     taken={str(i): n for i, n in ledger.taken.items()}, clipped=ledger.clipped)
        if "rng" in state:
            state["rng"] = ledger.rng.bit_generator.state

    def release(self, name: str, members: list[str], uploads: dict[str, np.ndarray] | None = None
                ) -> dict[str, np.ndarray] | None:
        """Account one noisy sum of these devices (with central noise, `uploads`: their values, clipped, summed and
        noised here, the sum returned); the job fails (None) if it would spend more than the budget."""
        index = self.index()
        ids = np.array(sorted(index[m] for m in members), dtype=np.int64)
        noise = self.noise_of(name)
        rate = float(self.info["dp"]["fraction"]) if self.sampled_sum(name) else 1.0
        try:
            if uploads is None:
                noise.release(ids, rate)
                total = None
            else:
                total = noise.central(ids, uploads, rate)
        except ValueError as e:
            self.fail(f"noisy sum {name!r}: {e}")
            return None
        self.keep(noise.ledger)
        return total if total is not None else {}

    def noise_of(self, name: str) -> Noise:
        """The Gaussian mechanism of the sum `name` (its clips, the job's multiplier)."""
        return self.ledger().noise(self.noisy_table()[name].clips)

    # -- central noise: each sum collected in the clear, one round ------------------------------------
    def validate_clear(self, msg: Upload) -> None:
        """Refuse a device's values for a sum in the clear that are not the sum's (names, shapes, finite)."""
        name = self.phase.partition(":")[0]
        shapes = self.noisy_table()[name].shapes
        if set(msg.arrays) != set(shapes):
            raise ProtocolError("value", f"the sum {name!r} takes {sorted(shapes)}, got {sorted(msg.arrays)}")
        for k, v in msg.arrays.items():
            if v.shape != tuple(shapes[k]) or not np.all(np.isfinite(v)):
                raise ProtocolError("value", f"{k} must be {tuple(shapes[k])} finite values, got {v.shape}")

    def close_clear(self, name: str, answered: list[str]) -> dict[str, Any]:
        """A sum in the clear: the devices' values clipped, summed, and the whole noise added by the coordinator
        (models.private.dp.Noise.central, the simulator's), its generator saved with the job: a round closed again
        after a restart draws from where the saved state left it, the same noise."""
        if len(answered) < 2:
            self.fail(f"{len(answered)} devices answered the sum {name!r}; a sum needs at least 2")
            return {}
        index = self.index()
        answered = sorted(answered, key=index.__getitem__)  # in the participants' order, as the simulator sums
        uploads = {k: np.stack([self.pending[a].arrays[k] for a in answered]) for k in self.noisy_table()[name].shapes}
        total = self.release(name, answered, uploads)
        if total is None:
            return {}
        done = self.info.setdefault("sums", {})
        done[name] = done.get(name, 0) + 1
        return {"sum": name, "answered": len(answered), **self.noisy_summed(name, total, len(answered), answered)}

    def noisy_announced(self, name: str, members: list[str]) -> tuple[dict[str, tuple[int, ...]], dict[str, float],
                                                                       float, int]:
        """(shapes, scales, clip, ring bits) of the noisy sum `name` over these devices: the clip keeps room in the
        ring for the devices' noise shares, as the simulator's transport does."""
        s = self.noisy_table()[name]
        return s.shapes, s.scales, 1.0 + self.noise_of(name).room(s.scales, len(members)), s.bits

    def noisy_extra(self, name: str) -> dict[str, Any]:
        """What a noisy sum's advertise round announces besides the secure sum: the multiplier, the clips, the sum's
        index in the job (each device's noise stream) and, for the threshold, the anchor and the quantile."""
        extra: dict[str, Any] = {"multiplier": float(self.info["dp"]["multiplier"]),
                                 "clips": dict(self.noisy_table()[name].clips),
                                 "index": int(self.info["dp"]["released"])}
        if name == "threshold":
            extra.update(anchor=float(self.info["anchor"]), quantile=float(self.spec.quantile))
        return {"dp": extra}

    def noisy_summed(self, name: str, total: dict[str, np.ndarray], asked: int, members: list[str]) -> dict[str, Any]:
        """Take a noisy sum's decoded total: a sum of fewer uploads than its noise was shared for fails the job (its
        noise is short of the target); otherwise it counts as released, and gives what it gives."""
        if len(members) < fewest_uploads(asked):
            self.fail(f"noisy sum {name!r}: {len(members)} of {asked} devices uploaded; their noise shares fall short "
                      f"of the target (at least {fewest_uploads(asked)} uploads)")
            return {}
        if self.spec.private and self.release(name, members) is None:  # (central noise: released as it was added)
            return {}
        n = int(self.info["dp"]["devices"])
        if name == "mean":
            self.info["mean"] = (total["m1"][0] / n).tolist()
            return {}
        if name == "centred":
            pre = noisy_standardisation(self.spec.features, np.array(self.info["mean"]), total, n)
            self.info["scale"] = pre.scale.tolist()
            return {}
        if name == "anchor":
            self.info["anchor"] = anchor_of(total, self.noise_of(name).std("h"), self.spec.quantile, n)
            return {"anchor": self.info["anchor"]}
        if name == "threshold":
            threshold, self.tail = noisy_threshold(total, float(self.info["anchor"]), self.spec.quantile, n,
                                                   self.private_holdout())
            spent = self.budget_spent()
            self.store_model(self.standardisation(), threshold, {"dp": spent})
            return {"threshold": threshold, "dp": spent}
        return self.summed_family(name, total, members)

    def budget_spent(self) -> dict[str, Any]:
        """The job's `dp` report, as `fedsentry simulate`'s JSON (models.private.accounting.report): the sums
        released so far; with distributed noise, how many uploads the devices clipped is theirs to know (None)."""
        from models.private.accounting import Budget, report

        ledger = self.ledger()
        for s in self.noisy_table().values():
            ledger.clips.update(s.clips)
        out = report(ledger, Budget(self.spec.dp_epsilon, self.spec.dp_delta))
        if self.spec.private:  # the devices clip their own uploads: the coordinator cannot count them
            out["clipped_uploads"] = None
        return out

    # provided by the job runner and the private detector (which come first in the job's bases)
    tail: Any = None

    def fail(self, why: str) -> None:
        raise NotImplementedError

    def index(self) -> dict[str, int]:
        raise NotImplementedError

    def summed_family(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def private_holdout(self) -> float:
        raise NotImplementedError

    def standardisation(self) -> Any:
        raise NotImplementedError

    def store_model(self, pre: Any, threshold: float, extra: dict[str, Any]) -> None:
        raise NotImplementedError
