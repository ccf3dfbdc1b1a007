"""Each component's own tail (issue 21, points 3 and 4; a simulator option, `--component-tails`).

The label-free threshold reads one tail, the fleet's held-out normal scores. A light component of rare normal
traffic scores its own records high (its small weight), so they take much of the false-positive budget, and records
beside them that are not its traffic (ton-iot's attack floods) sit just under the threshold
(benchmarks/results/stability.md). Here a record's score is instead its tail probability among the fleet's held-out
records that fall in the same component (the one most responsible for it): each device sends, for its held-out
records, a histogram of their scores per component (sums only: the fleet's is their sum), and the score becomes
-log S_k(s) with S_k the component's exceedance. A component holding few held-out records cannot tell its own tail,
so its curve is shrunk toward the fleet's by PRIOR records' worth of the fleet's curve:

    S_k(s) = (n_k S_k^own(s) + n0 S_fleet(s)) / (n_k + n0),  n0 = 1 / (1 - q)

(n0: the records a q-quantile needs to be seen once; mid-p counts within a bin). Beyond the fleet's largest held-out
score the survival cannot be read, and the score grows as log(s / s_top) on top of the last value, so far records
stay ordered.

The threshold is read, as any, from the held-out records' calibrated scores, but not from scores calibrated by
curves read from those same records (each would sit inside its own component's tail, and new normal traffic would
exceed the threshold more often than promised: measured, the fleet's false-positive rate rose from 1.5 to 1.7-2.2 %,
benchmarks/results/detector-ideas-2.md). So the curves are cross-fitted: each device's held-out records fall in two
halves (alternate records), each half's histograms are summed apart, and each half's records are calibrated by the
other half's curves for the threshold; the model scores new records by the curves of both halves together.
"""

from __future__ import annotations

import numpy as np

from models.detection.threshold import EDGES, error_histogram


class ComponentTails:
    """The fleet's per-component exceedance curves of held-out scores, summed from the devices' histograms."""

    def __init__(self, histograms: np.ndarray, q: float):
        """histograms: (K, bins) counts of held-out scores per component (on EDGES), summed over the devices."""
        H = np.asarray(histograms, dtype=float)
        if H.ndim != 2 or H.shape[1] != len(EDGES) - 1 or (H < 0).any() or H.sum() <= 0:
            raise ValueError(f"component tails need (components, {len(EDGES) - 1}) non-negative counts with at least "
                             f"one held-out record, got shape {H.shape}")
        if not 0 < q < 1:
            raise ValueError("q must be in (0, 1)")
        fleet = H.sum(axis=0)
        n, n_k, n0 = fleet.sum(), H.sum(axis=1), 1.0 / (1.0 - q)
        # records above each bin, plus half the bin's own (mid-p), for each component and the fleet
        own = np.cumsum(H[:, ::-1], axis=1)[:, ::-1] - H / 2
        fleet_above = (np.cumsum(fleet[::-1])[::-1] - fleet / 2) / n
        #: (K, bins): the shrunk exceedance of a score in each bin, per component
        self.survival = (own + n0 * fleet_above) / (n_k + n0)[:, None]
        self.counts = n_k
        #: the upper edge of the fleet's highest occupied bin: beyond it the survival is not read
        last = int(np.flatnonzero(fleet)[-1])
        self.top = float(EDGES[last + 1])
        #: each component's exceedance at the fleet's top bin: what a score beyond it starts from
        self.floor = self.survival[:, last]

    @classmethod
    def of(cls, scores: list[np.ndarray], components: list[np.ndarray], K: int, q: float) -> ComponentTails:
        """From each device's held-out scores and their components (what its histograms would carry)."""
        H = np.zeros((K, len(EDGES) - 1))
        for s, c in zip(scores, components):
            for k in np.unique(c):
                H[k] += error_histogram(s[c == k])
        return cls(H, q)

    @staticmethod
    def upload_bytes(components: list[np.ndarray], scores: list[np.ndarray]) -> int:
        """What the devices send: per device and half (`cross_fitted`) its non-empty (component, bin) cells, 4 + 4 +
        8 bytes each."""
        cells = 0
        for s, c in zip(scores, components):
            half = np.arange(len(s)) % 2 == 1
            for side in (False, True):
                for k in np.unique(c[half == side]):
                    cells += int(np.count_nonzero(error_histogram(s[(c == k) & (half == side)])))
        return 16 * cells

    def __call__(self, scores: np.ndarray, components: np.ndarray) -> np.ndarray:
        """Calibrated scores: 1 - log S_k(s) (positive, larger the rarer within the component), and beyond the
        fleet's largest held-out score that at its edge plus log(s / top)."""
        s = np.asarray(scores, dtype=float)
        b = np.clip(np.searchsorted(EDGES, np.clip(s, EDGES[0], EDGES[-1]), side="right") - 1, 0, len(EDGES) - 2)
        k = np.asarray(components)
        S = np.maximum(self.survival[k, b], self.floor[k])
        return 1.0 - np.log(S) + np.log(np.maximum(s, self.top) / self.top)


def cross_fitted(scores: list[np.ndarray], components: list[np.ndarray], K: int,
                 q: float) -> tuple[ComponentTails, list[np.ndarray]]:
    """The fleet's curves from every held-out record, and each device's held-out records calibrated by the curves
    of the other half's records (alternate records: no generator, the same on a device)."""
    halves = [np.arange(len(s)) % 2 == 1 for s in scores]
    each = [ComponentTails.of([s[h == side] for s, h in zip(scores, halves)],
                              [c[h == side] for c, h in zip(components, halves)], K, q) for side in (False, True)]
    calibrated = []
    for s, c, h in zip(scores, components, halves):
        out = np.empty(len(s))
        out[h] = each[0](s[h], c[h])  # the odd records by the even records' curves
        out[~h] = each[1](s[~h], c[~h])
        calibrated.append(out)
    return ComponentTails.of(scores, components, K, q), calibrated
