"""Differential privacy of a detector job's sums: the Gaussian mechanism on every sum the coordinator learns
(issue 23, point 4; docs/privacy.md has the design).

The privacy unit is a device: its whole contribution over the job. Every phase's sum is a query, and each device's
part of it is clipped, per upload name, to an L2 norm the job announces (`Noise.clips`); a device's weight is 1
(a weight from its record count would need the count, which is not released). With G names in a query and a
noise multiplier sigma, name k gets Gaussian noise of standard deviation sigma sqrt(G) c_k on each value: divided
by sqrt(G) c_k, the query's values have L2 sensitivity 1 and noise sigma, one Gaussian mechanism of multiplier sigma
per query, which `models.private.accounting` composes over the job.

Central: the coordinator sums in the clear and adds the whole noise. Distributed (private mode): each device adds
its share before masking, a variance of 1/m of the target where m is the fewest uploads the secure sum can be
completed with (a third of a round may drop: m = n - floor(n / 3)); a round completed with fewer uploads would
carry less than the target noise, and fails instead. A device draws its share from its own stream, keyed by its
secret and the sum's index in the job (`device_share`): the same sum asked again (a retry, a coordinator restarted)
gets the same noise, never a second draw; a simulation keys device i's stream with (seed, 4242, i), a real device
with a secret of its own that the coordinator never sees.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from models.core.federated import State
from models.core.rounds import RoundFailedError


def fewest_uploads(devices: int) -> int:
    """The fewest uploads a secure sum of `devices` devices completes with: all but a third of them."""
    return devices - devices // 3


def device_key(seed: int, device: int) -> list[int]:
    """The key of a simulated device's noise stream (a real device keeps a secret key of its own)."""
    return [int(seed), 4242, int(device)]


def clip_rows(values: np.ndarray, norm: float) -> tuple[np.ndarray, int]:
    """Each row (a device's values, the leading axis) scaled into the L2 ball of radius `norm`; and how many were."""
    v = np.asarray(values, dtype=float)
    size = np.sqrt((v.reshape(len(v), -1) ** 2).sum(axis=1))
    factor = np.minimum(1.0, norm / np.maximum(size, 1e-300))
    return v * factor.reshape(-1, *([1] * (v.ndim - 1))), int(np.count_nonzero(factor < 1))


@dataclass
class Ledger:
    """What a job's noisy sums share: the noise multiplier, where the noise is added, the generator, and each
    sum's sampling rate as it is released (for the accountant)."""

    multiplier: float  # sigma: noise standard deviation over L2 sensitivity
    distributed: bool  # each device adds its share (private mode) rather than the coordinator
    fleet: int  # devices in the job: a sum of all of them is not sampled
    fraction: float  # the rounds' sampling rate
    plan: Mapping[float, int] = field(default_factory=dict)  # the sums the budget was calibrated for, per rate
    seed: int = 0
    released: list[float] = field(default_factory=list)  # each sum's sampling rate, in order
    taken: Counter[int] = field(default_factory=Counter)  # each device's sampled sums (rounds it answered)
    clipped: int = 0  # device uploads (names) the clip shortened
    clips: dict[str, float] = field(default_factory=dict)  # every query's clip norms, by upload name

    def __post_init__(self) -> None:
        if not (np.isfinite(self.multiplier) and self.multiplier >= 0):
            raise ValueError(f"the noise multiplier must be a number >= 0, got {self.multiplier}")
        self.rng = np.random.default_rng([self.seed, 4242])

    def noise(self, clips: Mapping[str, float]) -> Noise:
        """The Gaussian mechanism for a query whose uploads are named by `clips` (each name's L2 clip)."""
        self.clips.update(clips)
        return Noise(self, dict(clips))


@dataclass
class Noise:
    """The Gaussian mechanism on one kind of query (see the module): `clips` per upload name."""

    ledger: Ledger
    clips: dict[str, float]

    def std(self, name: str, names: int | None = None) -> float:
        """The noise's standard deviation on each value of `name` in a sum of `names` names (default: every name
        of `clips`)."""
        return self.ledger.multiplier * np.sqrt(names or len(self.clips)) * self.clips[name]

    def clip(self, uploads: State) -> State:
        """Each device's values of each name scaled into the name's L2 ball (the leading axis: devices)."""
        missing = set(uploads) - set(self.clips)
        if missing:
            raise ValueError(f"a noisy sum needs a clip for every upload: none for {sorted(missing)}")
        out = {}
        for k, v in uploads.items():
            out[k], clipped = clip_rows(v, self.clips[k])
            self.ledger.clipped += clipped
        return out

    def release(self, ids: np.ndarray, rate: float | None = None) -> None:
        """Record one noisy sum of these devices at sampling rate `rate` (None: the whole fleet's is not sampled, a
        round's is; a coordinator says which, as a device missing from a sum of every device leaves it unsampled);
        ValueError once the sums of a kind outnumber the plan the noise was calibrated for (the budget is spent)."""
        ledger = self.ledger
        q = rate if rate is not None else 1.0 if len(ids) >= ledger.fleet else ledger.fraction
        if ledger.plan and ledger.released.count(q) >= ledger.plan.get(q, 0):
            raise ValueError(f"the privacy budget is spent: it was calibrated for {ledger.plan.get(q, 0)} sums at "
                             f"sampling rate {q:g}")
        ledger.released.append(q)
        if q < 1:
            ledger.taken.update(int(i) for i in ids)

    def device_shares(self, ids: np.ndarray, uploads: State) -> State:
        """Distributed noise: clipped uploads, each device's with its share of the noise added (before masking),
        device i's drawn from its stream keyed (seed, 4242, i) (`device_share`)."""
        index = len(self.ledger.released)  # this sum's place among the job's noisy sums
        self.release(ids)
        rows = [self.device_share({k: v[j] for k, v in uploads.items()}, len(ids), device_key(self.ledger.seed, i),
                                  index) for j, i in enumerate(ids)]
        return {k: np.stack([r[k] for r in rows]) for k in uploads}

    def device_share(self, values: State, members: int, key: list[int], index: int) -> State:
        """One device's values (no leading axis) clipped, with its share of the noise of a sum of `members` devices
        added: drawn from the stream keyed by its `key` and the sum's `index` in the job (names in sorted order),
        so that the same sum asked again draws the same noise."""
        share = 1.0 / np.sqrt(fewest_uploads(members))
        clipped = self.clip({k: np.asarray(v, dtype=float)[None] for k, v in values.items()})
        rng = np.random.default_rng([*key, index])
        G = len(values)
        return {k: clipped[k][0] + rng.normal(0.0, self.std(k, G) * share, clipped[k].shape[1:])
                for k in sorted(clipped)}

    def check_uploads(self, sampled: int, uploaded: int) -> None:
        """A distributed sum completed with fewer uploads than its noise was shared for fails (RoundFailedError)."""
        if uploaded < fewest_uploads(sampled):
            raise RoundFailedError(f"{uploaded} of {sampled} devices uploaded: their noise is short of the target "
                                   f"(at least {fewest_uploads(sampled)} uploads)")

    def central(self, ids: np.ndarray, uploads: State, rate: float | None = None) -> State:
        """Central noise: the clipped uploads' sum (leading axis 1) with the whole noise added by the coordinator
        (`rate`: the sum's sampling rate, as `release`)."""
        self.release(ids, rate)
        rng, G = self.ledger.rng, len(uploads)
        return {k: v.sum(axis=0, keepdims=True) + rng.normal(0.0, self.std(k, G), (1, *v.shape[1:]))
                for k, v in self.clip(uploads).items()}

    def room(self, scales: Mapping[str, float], devices: int) -> float:
        """How far, over its scale, a device's share of the noise may carry a scaled value of the sum of these
        names (`scales`) over `devices` devices: what the ring keeps above the clip (the most of `headroom`)."""
        return max(self.headroom(k, len(scales), devices) / float(scales[k]) for k in scales)

    def headroom(self, name: str, names: int, devices: int) -> float:
        """How far a device's share of the noise may carry one value of `name` in a sum of `names` names (8
        standard deviations): room the secure sum's ring keeps above the clip."""
        return 8.0 * self.std(name, names) / np.sqrt(fewest_uploads(devices))
