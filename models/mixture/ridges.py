"""Several ridges from the same statistics: one score (issue 21, points 3 and 4).

The statistics the devices upload (k-means rounds: every record to its nearest mean) do not depend on the ridge
added to each covariance, so the server can take the M-step of the same aggregate at several ridges at no extra
round or upload: the same weights and means, covariances from tight (1e-4, what IoT flows need) to broad (0.1,
what nsl-kdd needs). Each mixture scores a record on a scale of its own, so the mixtures are put on one scale by
their tails on the fleet's held-out normal records: above its q-quantile t_j, mixture j's exceedance is taken to
fall exponentially, p_j(s) = (1 - q) exp(-(s - t_j) / b_j), with b_j read from the same tail (the score at
SPREAD times the promised exceedance). A record scores by its smallest p-value across the mixtures,
exp(max_j (s_j - t_j) / b_j) (a monotone transform of -log min_j p_j), and the threshold of that combined score is
read from the held-out records' combined scores in turn (the max of several p-values exceeds any one's level
more often than promised: calibrating the combination itself keeps the fleet's false-positive rate at 1 - q).
"""

from __future__ import annotations

import numpy as np

from models.detection.threshold import Tail

#: the exceedance, as a multiple of the promised one (1 - q), at which each mixture's tail scale is read
SPREAD = 4.0
#: the combined score's exponent is clipped here (exp stays finite; far beyond any threshold)
LARGEST = 700.0


def tail_scale(threshold: float, tail: Tail, q: float) -> tuple[float, float]:
    """(t, b) of one mixture from the fleet's held-out tail: its threshold t, and the score distance b over which
    its exceedance falls by a factor e (from the score where it is SPREAD times the promised 1 - q)."""
    level = SPREAD * (1 - q)
    # exceedances descend as thresholds ascend: interpolate log score against log exceedance
    ex, th = np.log(tail.exceedances[::-1]), np.log(tail.thresholds[::-1])
    lower = float(np.exp(np.interp(np.log(level), ex, th)))
    b = (float(threshold) - lower) / np.log(SPREAD)
    return float(threshold), max(b, 1e-6 * max(float(threshold), 1.0))


def tail_scales(tails: list[tuple[float, Tail]], q: float) -> np.ndarray:
    """(M, 2): each mixture's (t, b) from its fleet threshold and tail (`tail_scale`), the first ridge's first."""
    return np.array([tail_scale(t, tail, q) for t, tail in tails])


def combine(scores: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The combined score of records scored by each mixture (`scores` (M, n)), with each mixture's (t, b) in the
    rows of `scales` (M, 2): exp(max_j (s_j - t_j) / b_j), clipped to stay finite."""
    z = (np.asarray(scores, float) - scales[:, :1]) / scales[:, 1:]
    return np.exp(np.clip(z.max(axis=0), -LARGEST, LARGEST))
