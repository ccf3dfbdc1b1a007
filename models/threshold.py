"""Label-free thresholds, computed across clients without pooling their errors.

Every client histograms its reconstruction errors on the same fixed grid (log-spaced, so relative
resolution is the same at every scale); the server sums the counts and reads off the quantile.
"""

from __future__ import annotations

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

