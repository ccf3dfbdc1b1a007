"""Label-free thresholds, computed across clients without pooling their errors.

Every client histograms its reconstruction errors on the same fixed grid (log-spaced, so relative
resolution is the same at every scale); the server sums the counts and reads off the quantile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: log-spaced bin edges shared by every client: 1e-8 .. 1e8 with 0.45 % relative bin width
EDGES = np.geomspace(1e-8, 1e8, 8193)


def error_histogram(errors: np.ndarray, edges: np.ndarray = EDGES) -> np.ndarray:
    """Counts of errors per bin; values outside the grid go to the first or last bin."""
    e = np.clip(np.asarray(errors, dtype=float), edges[0], edges[-1])
    idx = np.clip(np.searchsorted(edges, e, side="right") - 1, 0, len(edges) - 2)
    return np.bincount(idx, minlength=len(edges) - 1)


def quantile_from_histogram(counts: np.ndarray, q: float, edges: np.ndarray = EDGES) -> float:
    """The q-quantile of the pooled errors, interpolated geometrically inside its bin."""
    if not 0 < q < 1:
        raise ValueError("quantile must be in (0, 1)")
    counts = np.asarray(counts, dtype=float)
    total = counts.sum()
    if total == 0:
        raise ValueError("no errors to take a quantile of")
    cum = np.cumsum(counts)
    target = q * total
    b = int(np.searchsorted(cum, target, side="left"))
    before = cum[b - 1] if b > 0 else 0.0
    frac = (target - before) / counts[b] if counts[b] else 0.0
    lo, hi = edges[b], edges[b + 1]
    return float(lo * (hi / lo) ** frac)


def federated_quantile(client_errors: list[np.ndarray], q: float) -> float:
    """Quantile over all clients' errors, from their histograms alone."""
    counts = np.sum([error_histogram(e) for e in client_errors], axis=0)
    return quantile_from_histogram(counts, q)


def sparse_histogram(errors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What a device sends for the threshold: the non-empty bins of its errors' histogram and their counts."""
    counts = error_histogram(errors)
    nz = np.flatnonzero(counts)
    return nz.astype(np.int32), counts[nz].astype(np.int64)


def holdout_mask(n: int, share: float) -> np.ndarray:
    """Which of a device's n training records are held out (every round(1/share)-th one, so the split needs
    no generator and is the same in the simulator and on the device): the records a detector that can
    over-fit its training records takes its threshold from."""
    if share <= 0:
        return np.zeros(n, dtype=bool)
    step = max(2, int(round(1 / share)))
    return np.arange(n) % step == step - 1


def device_threshold(federation: float, scores: np.ndarray, q: float, bound: float = 2.0,
                     min_records: int = 200) -> float:
    """Per-device calibration of a federation's threshold: the device's own q-quantile of its held-out
    scores, kept within a factor `bound` of the federation's threshold (a device with unusual or too little
    traffic cannot turn its detector off or flag everything); the federation's threshold when the device has
    fewer than `min_records` scores. Non-i.i.d. devices see very different false-positive rates under one
    global threshold; calibrated, each flags about 1 - q of its own normal traffic."""
    scores = np.asarray(scores, dtype=float)
    if len(scores) < min_records:
        return float(federation)
    own = quantile_from_histogram(error_histogram(scores), q)
    return float(np.clip(own, federation / bound, federation * bound))



#: the fleet's tail is published at exceedance levels (1 - q) * 2^(j / TAIL_STEP) for j = -TAIL_SPAN .. TAIL_SPAN
#: (a factor 16 either side of the promised false-positive rate): what a device's own threshold may move within
TAIL_SPAN, TAIL_STEP = 16, 4


def tail_levels(q: float) -> np.ndarray:
    """The exceedance levels the fleet's tail is published at, descending (those below 1)."""
    levels = (1 - q) * 2.0 ** (np.arange(TAIL_SPAN, -TAIL_SPAN - 1, -1) / TAIL_STEP)
    return levels[levels < 1]


@dataclass(frozen=True)
class Tail:
    """The fleet's exceedance curve near its threshold (`models.detection.screening.fleet_tail`): `thresholds`
    ascending, `exceedances` the (winsorised) share of the devices' held-out records above each, and `prior`
    how many records that curve counts for beside a device's own. `holdout` is the share of its records a
    device held out in training, the records its own curve comes from."""

    thresholds: np.ndarray
    exceedances: np.ndarray
    prior: float
    holdout: float

    def to_meta(self) -> dict[str, Any]:
        return {"thresholds": [float(t) for t in self.thresholds], "exceedances": [float(e) for e in self.exceedances],
                "prior": self.prior, "holdout": self.holdout}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Tail:
        t, e = np.asarray(meta["thresholds"], dtype=float), np.asarray(meta["exceedances"], dtype=float)
        prior = float(meta.get("prior", 0))
        if (t.ndim != 1 or t.shape != e.shape or len(t) < 2 or not np.all(np.isfinite(t)) or np.any(t <= 0)
                or np.any(np.diff(t) < 0) or not np.all((e > 0) & (e < 1)) or np.any(np.diff(e) > 0)
                or not (np.isfinite(prior) and prior > 0)
                or not 0 < float(meta.get("holdout", 0)) < 1):
            raise ValueError("tail: thresholds must ascend and be positive, exceedances descend within (0, 1), "
                             "prior be positive, holdout within (0, 1)")
        return cls(t, e, prior, float(meta["holdout"]))


def shrunk_threshold(scores: np.ndarray, fleet: float, tail: Tail | None, q: float) -> float:
    """A device's own threshold, shrunk toward the fleet's: where the posterior mean of its exceedance,
    (n * own share above t + prior * fleet's share above t) / (n + prior), falls to 1 - q. A device with few
    held-out records, or in a fleet whose devices differ no more than chance allows, stays near the fleet's
    threshold; a device whose own normal traffic scores high (or low) moves its threshold as far as its records
    justify, and never past the ends of the published tail (the fleet's threshold at 16 times and 1/16 of the
    promised rate), so no device can switch its detector off or flag everything."""
    scores = np.asarray(scores, dtype=float)
    if tail is None or not len(scores):
        return float(fleet)
    lo, hi = tail.thresholds[0], tail.thresholds[-1]
    grid = np.concatenate([[lo], EDGES[(lo < EDGES) & (hi > EDGES)], [hi]])
    n = len(scores)
    own = 1.0 - np.searchsorted(np.sort(scores), grid, side="right") / n
    fleet_share = np.exp(np.interp(np.log(grid), np.log(tail.thresholds), np.log(tail.exceedances)))
    post = (n * own + tail.prior * fleet_share) / (n + tail.prior)
    below = np.flatnonzero(post <= 1 - q)
    return float(grid[below[0]] if len(below) else hi)


#: without a published fleet tail (a PCA model), how far above the federation's threshold an analyst's false-positive
#: feedback may raise a device's threshold: the same factor `device_threshold` lets a device's own quantile move
FEEDBACK_FACTOR = 2.0


def feedback_cap(fleet: float, tail: Tail | None, base: float) -> float:
    """The highest threshold false-positive feedback may give a device (issue 24, point 3).

    With the fleet's tail (a mixture), the top of that tail: the fleet's threshold at which its devices' held-out
    records exceed it 1/16 as often as promised ((1 - q) / 16, TAIL_SPAN steps of TAIL_STEP above the promised
    rate), the same end `shrunk_threshold` never passes. However many records analysts mark, a device keeps
    flagging at that rate at least: feedback can quiet the traffic it was shown, never switch the detector off.
    Without a tail, FEEDBACK_FACTOR times the federation's threshold. Never below the device's threshold before
    feedback (`base`): feedback only raises a threshold."""
    cap = float(tail.thresholds[-1]) if tail is not None else FEEDBACK_FACTOR * float(fleet)
    return max(cap, float(base))


def feedback_threshold(before: float, scores: np.ndarray, cap: float) -> tuple[float, bool]:
    """The threshold after one analyst action marking records of these scores (under the model in use) as normal:
    the highest of them (past its rounding: `above_rounding`), so that none of them is flagged again (a record is
    flagged when its score exceeds the threshold), and never above `cap` (`feedback_cap`) nor below `before`.
    Returns (threshold, whether the cap held it back: some marked record still exceeds it)."""
    scores = np.asarray(scores, dtype=float)
    want = max(float(before), above_rounding(float(scores.max()))) if len(scores) else float(before)
    return min(want, max(float(cap), float(before))), want > cap


#: how far above a marked record's score the threshold goes: the same record scored again (alone, or in a batch of
#: another size or memory layout) can score a few rounding steps (about 1e-15 relative) higher
SCORE_ROUNDING = 1e-9


def above_rounding(score: float) -> float:
    """A score raised past the rounding of scoring it again (`SCORE_ROUNDING`, relative; a score may be negative)."""
    return score + SCORE_ROUNDING * max(abs(score), 1e-300)
