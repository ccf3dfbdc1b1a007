"""A per-feature monotone (quantile) map from a fleet's records onto Q (issue 26, point 5): in one dimension the
W2-optimal map is the monotone rearrangement F_Q^-1 o F_P, and a map applying one increasing function per feature
is the gradient of a separable convex function, hence itself an optimal transport map; for a monotone per-feature
drift it is the drift's inverse wherever the joint law is kept.

Federated: each device counts its standardised records per feature on one fixed grid (`GRID`, the same for every
device and job) and uploads the counts; the server adds them (sums only, so private mode's summed uploads carry
them too), forms P's per-feature CDF and maps every bin onto the matching quantiles of its own samples of Q.

Discrete values: a bin's records are mapped onto the middle of the quantile range the bin holds, trimmed by
`TRIM` of its mass at each end (TRIM = 1/2, the default: every record of the bin onto Q's mid-quantile). An atom
of P then lands on Q's atom as long as their quantile ranges are misaligned by less than TRIM of the atom's mass
(Q's own sampling noise; 5 % attacks in the training records shift a quantile by at most 0.05, so atoms holding
less than about a tenth of the records may land on a neighbour). A continuous bin (0.01 wide near the centre)
goes onto one value, the middle of its quantile range."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

#: the fixed grid's edges, in the detector's standardised units: sinh-spaced, 0.01 wide at 0 and widening with |x|
#: (0.1 at 10, 1 at 100; records beyond +-GRID_LIMIT count in the end bins): discrete values of the datasets here
#: sit 0.02 or more apart near the centre
GRID_STEP, GRID_LIMIT = 0.01, 128.0
GRID = np.sinh(np.arange(-np.ceil(np.arcsinh(GRID_LIMIT) / GRID_STEP),
                         np.ceil(np.arcsinh(GRID_LIMIT) / GRID_STEP) + 1) * GRID_STEP)
#: how much of a bin's quantile range is cut at each end before mapping it (see the module's docstring; measured
#: on the tests' drifted fleet, a rate on hundredths: 24 % of its records land on their own value at 0.25, 91 % at
#: 0.5, the continuous feature's miss 0.029 and 0.033)
TRIM = 0.5
#: how many records a quantile map moves at a time
CHUNK = 4096


def _bins(X: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each value's bin on `edges` (n, d); values beyond the grid in its end bins."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise ValueError(f"quantile map: records must be a finite 2-d array (records, features), got shape {X.shape}")
    return np.clip(np.searchsorted(edges, X, side="right") - 1, 0, len(edges) - 2)


def histogram(X: np.ndarray, edges: np.ndarray = GRID) -> np.ndarray:
    """A device's upload: the count of its records (n, d), standardised, in each bin of each feature (d, bins);
    values beyond the grid count in its end bins. Counted `CHUNK` records at a time."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"quantile map: records must be a finite 2-d array (records, features), got shape {X.shape}")
    out = np.zeros((X.shape[1], len(edges) - 1))
    for i in range(0, len(X), CHUNK):  # `CHUNK` records at a time: the bins' temporaries are a chunk's size
        k = _bins(X[i: i + CHUNK], edges)
        out += np.stack([np.bincount(k[:, j], minlength=len(edges) - 1) for j in range(k.shape[1])])
    return out


@dataclass(frozen=True)
class Marginals:
    """A target's per-feature marginals as sums on the grid: per bin, the count of its records and the sum of
    their values (d, bins each), so every bin's records sit at their mean (a discrete value exactly). What a
    fleet's devices can upload, summed, and a promoted model can carry instead of samples of its mixture."""

    counts: np.ndarray
    sums: np.ndarray

    @classmethod
    def of(cls, X: np.ndarray, edges: np.ndarray = GRID) -> Marginals:
        k, X = _bins(X, edges), np.asarray(X, dtype=float)
        sums = np.stack([np.bincount(k[:, j], X[:, j], len(edges) - 1) for j in range(k.shape[1])])
        return cls(histogram(X, edges), sums)

    def __add__(self, other: Marginals) -> Marginals:
        """Two fleets' (or devices') marginals together: the server's sum."""
        return Marginals(self.counts + other.counts, self.sums + other.sums)

    def quantile(self, j: int, u: np.ndarray) -> np.ndarray:
        """Feature j's quantile function: each non-empty bin's mean over the quantile range its count holds."""
        full = np.flatnonzero(self.counts[j] > 0)
        c = self.counts[j, full]
        upper = np.cumsum(c) / c.sum()
        xp = np.ravel(np.column_stack([upper - c / c.sum(), upper]))
        return np.interp(u, xp, np.repeat(self.sums[j, full] / c, 2))


@dataclass(frozen=True)
class QuantileMap:
    """One increasing piecewise-linear function per feature: on bin k of `edges`, from lo[j, k] at its left edge
    to hi[j, k] at its right edge (lo == hi: the whole bin onto one value); beyond the grid, slope 1."""

    edges: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """The records moved (float64), `CHUNK` records at a time (the map's temporaries are several times a
        chunk's size, not the records')."""
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.lo.shape[0]:
            raise ValueError(f"quantile map: expected records with {self.lo.shape[0]} features, got shape {X.shape}")
        out = np.empty(X.shape)
        for i in range(0, len(X), CHUNK):
            out[i: i + CHUNK] = self._moved(np.asarray(X[i: i + CHUNK], dtype=float))
        return out

    def _moved(self, X: np.ndarray) -> np.ndarray:
        e, bins = self.edges, len(self.edges) - 1
        k = np.clip(np.searchsorted(e, X, side="right") - 1, 0, bins - 1)
        t = (X - e[k]) / (e[k + 1] - e[k])
        cols = np.arange(X.shape[1])
        lo, hi = self.lo[cols, k], self.hi[cols, k]
        inside = lo + (hi - lo) * np.clip(t, 0.0, 1.0)
        below, above = e[0] > X, e[-1] < X
        return np.where(below, lo + (X - e[0]), np.where(above, hi + (X - e[-1]), inside))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The map's arrays as it travels and is stored, in float64 (float32 values would move the slope-1 parts
        beyond the fleet's records by up to 1.5e-5 of their slope: tests/models/test_otmap_quantile.py)."""
        return {"edges": self.edges, "lo": self.lo, "hi": self.hi}

    def digest(self) -> str:
        """A hex digest of the map's values: what a round names for the map an agent keeps (the map itself travels
        once a job)."""
        h = hashlib.sha256()
        for a in (self.edges, self.lo, self.hi):
            h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
        return h.hexdigest()

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> QuantileMap:
        edges, lo, hi = (np.asarray(arrays[k], dtype=float) for k in ("edges", "lo", "hi"))
        if edges.ndim != 1 or lo.ndim != 2 or lo.shape != hi.shape or lo.shape[1] != len(edges) - 1 \
                or not (np.isfinite(lo).all() and np.isfinite(hi).all() and np.all(np.diff(edges) > 0)):
            raise ValueError("quantile map: edges must increase and lo, hi be finite (features, len(edges) - 1)")
        return cls(edges, lo, hi)


def _quantile(sorted_y: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Q's empirical quantile function (linear between order statistics: exact on Q's atoms)."""
    n = len(sorted_y)
    return np.interp(np.clip(u, 0.0, 1.0) * (n - 1), np.arange(n), sorted_y)


def quantile_map(counts: np.ndarray, Y: np.ndarray | Marginals, edges: np.ndarray = GRID,
                 trim: float = TRIM) -> QuantileMap:
    """The per-feature monotone map from P (the fleet's summed counts, (d, bins) on `edges`) onto Q (the server's
    samples Y, (m, d), or Q's `Marginals` on the same grid): each non-empty bin onto its trimmed quantile range
    of Q, empty bins between two non-empty ones linearly across the gap, and beyond P's records slope 1 (a record
    outside the fleet's range, an attack perhaps, keeps its distance from it)."""
    counts = np.asarray(counts, dtype=float)
    d, bins = counts.shape if counts.ndim == 2 else (0, 0)
    if counts.ndim != 2 or bins != len(edges) - 1 or np.any(counts < 0) or not np.isfinite(counts).all():
        raise ValueError(f"quantile map: counts must be non-negative, shape (features, {len(edges) - 1}), got "
                         f"{counts.shape}")
    if isinstance(Y, Marginals):
        if Y.counts.shape != counts.shape or Y.sums.shape != counts.shape or np.any(Y.counts < 0) \
                or np.any(Y.counts.sum(axis=1) <= 0):
            raise ValueError(f"quantile map: Q's marginals must be non-negative counts and sums, shape {counts.shape}, "
                             "with records in every feature")
        inverse = Y.quantile
    else:
        Y = np.asarray(Y, dtype=float)
        if Y.ndim != 2 or Y.shape[1] != d or len(Y) < 2:
            raise ValueError(f"quantile map: Q's samples must be (records >= 2, {d}), got {Y.shape}")
        ordered = np.sort(Y, axis=0)

        def inverse(j: int, u: np.ndarray) -> np.ndarray:
            return _quantile(ordered[:, j], u)
    if not 0 <= trim <= 0.5:
        raise ValueError(f"quantile map: trim must be in [0, 1/2], got {trim}")
    lo, hi = np.empty((d, bins)), np.empty((d, bins))
    for j in range(d):
        total = counts[j].sum()
        if total <= 0:
            raise ValueError(f"quantile map: feature {j} has no records")
        cdf = np.concatenate([[0.0], np.cumsum(counts[j])]) / total
        mass = np.diff(cdf)
        full = np.flatnonzero(mass > 0)
        a = inverse(j, cdf[full] + trim * mass[full])
        b = inverse(j, cdf[full + 1] - trim * mass[full])
        # the function at every edge: non-empty bins give their ends, the edges between them interpolate
        left, right = edges[full], edges[full + 1]
        xs = np.ravel(np.column_stack([left, right]))
        vs = np.ravel(np.column_stack([a, b]))
        lo[j] = np.interp(edges[:-1], xs, vs, left=np.nan, right=np.nan)
        hi[j] = np.interp(edges[1:], xs, vs, left=np.nan, right=np.nan)
        lo[j, full], hi[j, full] = a, b
        first, last = full[0], full[-1]
        lo[j, :first] = a[0] + (edges[:first] - edges[first])
        hi[j, :first] = a[0] + (edges[1:first + 1] - edges[first])
        lo[j, last + 1:] = b[-1] + (edges[last + 1:-1] - edges[last + 1])
        hi[j, last + 1:] = b[-1] + (edges[last + 2:] - edges[last + 1])
    return QuantileMap(np.asarray(edges, dtype=float), lo, hi)


def mapped_second(qmap: QuantileMap, counts: np.ndarray, second: float) -> float:
    """A bound on E||qmap(x)||^2 over a device's records from its histogram (d, bins on qmap's edges) and its
    records' own E||x||^2 (`second`): a bin's records map inside [lo, hi]; those of the end bins (which hold the
    records beyond the grid, moved with slope 1) within |x| + s of 0, s = |edge| + max(|lo|, |hi|), so
    (|x| + s)^2 <= 2 x^2 + 2 s^2 each. Exact when every record's bin maps onto one value (TRIM = 1/2) and the
    end bins are empty."""
    counts = np.asarray(counts, dtype=float)
    n = counts[0].sum()
    if n <= 0:
        return 0.0
    top = np.maximum(qmap.lo**2, qmap.hi**2)
    inner = float((counts[:, 1:-1] * top[:, 1:-1]).sum())
    ends, beyond = 0.0, 0.0
    for k, edge in ((0, qmap.edges[0]), (-1, qmap.edges[-1])):
        s = abs(edge) + np.sqrt(top[:, k])
        ends += float((counts[:, k] * 2 * s**2).sum())
        beyond = max(beyond, float(counts[:, k].sum()))
    # the end bins' records' own x^2 sum to at most the device's n E||x||^2
    return (inner + ends) / n + (2 * second if beyond else 0.0)
