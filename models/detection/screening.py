"""What one device may weigh in a federation: its claims checked, its weight capped, and the federation's
statistics taken so that no single device can move them far.

A device reports numbers about data nobody else can see (record counts, sums, histograms). The rules:

- a claim that no honest device could make is refused (`check_summary`, `check_histogram`);
- a count is capped at a multiple of the federation's median and each device's share of the total
  weight at `max_share` (`capped_weights`), so claiming 10^12 records buys no more than a big device has;
- the standardisation has bounded influence (`robust_standardisation`): against the pooled statistics of
  the other devices, one device may raise a feature's pooled variance by at most a factor 1 + `influence`;
- the threshold is a trimmed mean over devices of their own error quantiles (`robust_threshold`), or the
  mixture's winsorised mean of their exceedance curves (`fleet_tail`), `colluders` more devices left out at the
  top in both;
- a finished model must pass `model_problem` to be promoted.

The per-device diagonal of C_i the statistics phase yields is what FedMM checks uploads against
(models.pca.fedmm.admissible_scale). The simulator and the coordinator call the same functions, so a
simulated federation and a deployed one compute the same model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.core.aggregation import trimmed_weighted_mean, winsorized_weighted_mean
from models.core.pipeline import CAP_LEVEL, CAP_SCALE, cap_weights
from models.detection.preprocessing import constant
from models.detection.threshold import EDGES, TAIL_SPAN, Tail, quantile_from_histogram, tail_levels

#: |signed_log1p(x)| for every finite float64 x is below this: a larger transformed value is a lie
LOG_BOUND = 710.0
#: without the log transform, values must stay clear of overflow when squared and summed
RAW_BOUND = 1e100
#: a variance this small (a 10 % spread in log1p units) counts as "none" when bounding a device's influence:
#: a feature that only one device varies on is then bounded by this floor instead of by zero
VARIANCE_FLOOR = 0.01


@dataclass(frozen=True)
class Guard:
    """How much a device is trusted (the job's settings; defaults in PCAJobSpec)."""

    max_records: int = 1_000_000  # a device claiming more records than this is refused
    count_cap: float = 2.0  # counts are capped at this multiple of the federation's median count
    max_share: float = 0.1  # no device weighs more than this share of the total (at least 1/n)
    influence: float = 3.0  # one device may raise a feature's pooled variance by at most this factor + 1
    device_trim: float = 0.1  # share of devices whose error quantiles are left out on either side
    colluders: int = 2  # devices the threshold assumes may act together (robust_threshold; the mixture's is its
    # support rule's min_support - 1, models.mixture.fedem.colluders: 2 by default too)


DEFAULT_GUARD = Guard()


def capped_weights(counts: np.ndarray, guard: Guard) -> np.ndarray:
    """Each device's weight (mean 1 over the federation): its count, capped at `count_cap` times the
    median count, then no device above `max_share` of the total (water-filling; the share is at least 1/n).
    What the pipeline's `cap` stage gives each answer (`weight_caps`)."""
    return weight_caps(counts, guard).apply(counts)


def capped_counts(counts: np.ndarray, guard: Guard) -> np.ndarray:
    """The records each device is counted for (`capped_weights` before scaling to mean 1)."""
    return np.minimum(np.asarray(counts, dtype=float), cap_level(counts, guard))


@dataclass(frozen=True)
class WeightCaps:
    """The weight caps the statistics phase fixes: a device counts for at most `level` records, and weights are
    counted records over `scale` (the federation's mean counted records). The pipeline's `cap` stage applies
    them to each round's answers, which arrive weighted by the records their devices claimed
    (models.core.pipeline.cap reads them from the server state, `state()`)."""

    level: float
    scale: float

    def apply(self, counts: np.ndarray) -> np.ndarray:
        return cap_weights(np.asarray(counts, dtype=float), self.level, self.scale)

    def state(self) -> dict[str, np.ndarray]:
        return {CAP_LEVEL: np.array(self.level), CAP_SCALE: np.array(self.scale)}


def weight_caps(counts: np.ndarray, guard: Guard) -> WeightCaps:
    level = cap_level(counts, guard)
    counted = np.minimum(np.asarray(counts, dtype=float), level)
    return WeightCaps(level, float(counted.mean()) if len(counted) else 1.0)


def cap_level(counts: np.ndarray, guard: Guard) -> float:
    """The largest count a device is counted for: `count_cap` times the median count, lowered so that no device
    holds more than `max_share` of the counted total (water-filling; the share is at least 1/n). Both caps
    clip, so together they are one clip at the lower level."""
    w = np.asarray(counts, dtype=float)
    n = len(w)
    if n == 0:
        return float("inf")
    level = guard.count_cap * float(np.median(w))
    ws = np.sort(np.minimum(w, level))[::-1]
    share = max(guard.max_share, 1.0 / n)
    rest = np.cumsum(ws[::-1])[::-1]  # rest[j] = ws[j:].sum()
    for j in range(n):  # the j largest capped at share * T, where T = (sum of the rest) / (1 - j share)
        total = rest[j] / (1 - j * share)
        if ws[j] <= share * total * (1 + 1e-12):
            return min(level, share * total) if j else level
    return level


def value_bound(log_transform: bool) -> float:
    return LOG_BOUND if log_transform else RAW_BOUND


def check_summary(count: float, total: np.ndarray, sumsq: np.ndarray, guard: Guard, bound: float,
                  present: np.ndarray | None = None) -> str | None:
    """Why a device's (count, sum, sum of squares) could not come from real records, or None. With
    `present`, the sums of each feature are over its set values only (that many of them)."""
    if not (np.isfinite(count) and float(count).is_integer() and 1 <= count <= guard.max_records):
        return f"count {count!r} outside 1..{guard.max_records}"
    if not (np.isfinite(total).all() and np.isfinite(sumsq).all()):
        return "sums must be finite"
    n = np.full(len(total), float(count)) if present is None else np.maximum(np.asarray(present, float), 1.0)
    mean, second = total / n, sumsq / n
    if (np.abs(mean) > bound).any() or (second > bound * bound).any():
        return f"sums imply values beyond {bound:g}"
    if (second < mean * mean * (1 - 1e-9) - 1e-12 * (1 + mean * mean)).any():
        return "sum of squares below what the sum implies (negative variance)"
    return None


def robust_standardisation(count: np.ndarray, total: np.ndarray, sumsq: np.ndarray, weight: np.ndarray,
                           influence: float, min_scale: float = 1e-12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, scale and each device's diagonal diag(C_i) (n, d) from per-device (count, sum, sum of squares),
    stacked (n,), (n, d), (n, d), weighted by `weight`.

    Bounded influence: against the pooled statistics of the *other* devices (leave-one-out, mean mu and
    variance v per feature), a device's spread around mu may be at most v (1 + influence / share), the most
    that raises the pooled variance by a factor 1 + influence; a device beyond it has its deviations shrunk
    to that bound. Honest devices are rarely near it (a device with 1 % of the weight would need 100 times
    the others' variance), so an honest federation gets the plain pooled statistics; a liar moves a
    feature's scale by at most sqrt(1 + influence). Zero-variance features get scale 1."""
    count = np.asarray(count, dtype=float)[:, None]
    w = np.asarray(weight, dtype=float)[:, None]
    means = total / count
    var = np.maximum(sumsq / count - means**2, 0.0)
    if len(means) > 1:
        W = w.sum()
        rest = W - w
        mu = ((w * means).sum(axis=0) - w * means) / rest
        m2 = ((w * (var + means**2)).sum(axis=0) - w * (var + means**2)) / rest
        v = np.maximum(m2 - mu**2, 0.0)
        spread = var + (means - mu) ** 2
        bound = np.maximum(v, VARIANCE_FLOOR) * (1 + influence * W / w)
        shrink = np.sqrt(np.minimum(1.0, bound / np.maximum(spread, 1e-300)))
        beyond = shrink < 1
        means = np.where(beyond, mu + shrink * (means - mu), means)
        var = np.where(beyond, shrink**2 * var, var)
    share = w / w.sum()
    mean = (share * means).sum(axis=0)
    second = var + (means - mean) ** 2  # each device's second moment around the federation's mean
    scale = np.sqrt((share * second).sum(axis=0))
    scale = np.where(constant(mean, scale, min_scale), 1.0, scale)
    # the device computes its C_i from raw sums too: allow for the rounding of sum x^2 - n mean^2
    rounding = 1e-9 * (means**2 + var + mean**2)
    return mean, scale, (second + rounding) / scale**2


def check_histogram(bins: np.ndarray, counts: np.ndarray, claimed: float, n_bins: int = len(EDGES) - 1) -> str | None:
    """Why an error histogram (sparse: bin indices and counts) is not one of `claimed` records on the
    agreed grid, or None."""
    if bins.ndim != 1 or bins.shape != counts.shape:
        return "histogram needs bins and counts of one length"
    if not (np.issubdtype(bins.dtype, np.integer) and np.issubdtype(counts.dtype, np.integer)):
        return "histogram bins and counts must be integers"
    if len(bins) and (bins.min() < 0 or bins.max() >= n_bins or (np.diff(bins) <= 0).any()):
        return f"histogram bins must be increasing indices in 0..{n_bins - 1}"
    if (counts < 0).any():
        return "histogram counts must be non-negative"
    if int(counts.sum(dtype=np.int64)) != int(claimed):
        return f"histogram holds {int(counts.sum(dtype=np.int64))} errors, not the {int(claimed)} records claimed"
    return None


def admitted_summaries(summaries: list[tuple[int, np.ndarray, np.ndarray]], guard: Guard,
                       bound: float) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """The devices' (count, sum, sum of squares) when every one passes `check_summary` (the coordinator refuses a
    device that fails it); ValueError naming the first that does not (for simulations, whose devices cannot
    leave the fleet)."""
    for i, (n, total, sumsq) in enumerate(summaries):
        problem = check_summary(float(n), total, sumsq, guard, bound)
        if problem:
            raise ValueError(f"device {i}'s statistics are refused: {problem}")
    return summaries


def admitted_histograms(histograms: list[tuple[np.ndarray, np.ndarray]], claimed: list[int],
                        weight: np.ndarray) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The histograms that pass `check_histogram` against each device's claimed record count, and their devices'
    weights: what a threshold is taken from (the coordinator refuses the others' answers)."""
    ok = [check_histogram(np.asarray(b), np.asarray(c), claim) is None for (b, c), claim in zip(histograms, claimed)]
    return [h for h, k in zip(histograms, ok) if k], np.asarray(weight)[np.array(ok, dtype=bool)]


def device_quantile(bins: np.ndarray, counts: np.ndarray, q: float, n_bins: int = len(EDGES) - 1) -> float:
    dense = np.zeros(n_bins)
    dense[bins] = counts
    return quantile_from_histogram(dense, q)


def robust_threshold(histograms: list[tuple[np.ndarray, np.ndarray]], weight: np.ndarray, q: float,
                     trim: float, colluders: int = 0) -> float:
    """The label-free threshold: each device's q-quantile of its own errors (from its histogram), and a
    trimmed weighted mean of their logarithms over devices (errors are positive and spread over decades):
    one device moves it at most by the spread of the others' quantiles divided by their number.

    `colluders` more devices are left out at the top (`Guard.colluders`; never the majority): a raised threshold
    hides attacks, a lowered one only flags more. Without them, devices sending their records all at the top of
    the grid are trimmed in place of the honest devices with the highest quantiles, which then count: two of 21
    raised PCA's threshold 7 % on nsl-kdd and hid a third of the attacks it caught. With them, that many devices
    raise it at most to the honest devices' own symmetric trimmed mean; an honest fleet's threshold is that of
    its `colluders` highest devices left out too (a little lower: more flagged)."""
    some = np.array([int(np.sum(c)) > 0 for _, c in histograms], dtype=bool)  # a device left with no records
    if not some.any():
        raise ValueError("no errors to take a quantile of")
    logs = np.array([np.log(device_quantile(b, c, q)) for (b, c), s in zip(histograms, some) if s])
    w = np.asarray(weight, dtype=float)[some]
    return float(np.exp(trimmed_weighted_mean(logs[:, None], w, trim, colluders)[0]))


def exceedance_threshold(histograms: list[tuple[np.ndarray, np.ndarray]], weight: np.ndarray, q: float,
                         trim: float, colluders: int = 1) -> float:
    """The label-free threshold as the error at which a winsorised weighted mean over devices of the share
    of each device's records above it falls to 1 - q: the pooled q-quantile when no device stands out, and
    one device moves it at most as far as the others' exceedance curves allow (a trimmed mean would drop
    the honest devices with the most errors above each threshold, a skew non-i.i.d. traffic always has,
    and so promise less than it flags). Unlike the mean of per-device
    quantiles, it keeps the promised false-positive rate when devices' error scales differ (non-i.i.d.
    traffic scored by a detector that fits each region closely). At least `colluders` devices are winsorised
    at each side, and `colluders` more left out at the top first (`winsorized_weighted_mean`'s `above`): that
    many devices sending their records all at the bottom of the grid move it no further than the honest devices'
    curves allow, and all at the top raise it at most to the honest devices' own curve. Without the ones left
    out, two of 21 took the place of the honest devices winsorising pulled in and counted as the honest device
    with the most records above each threshold: nsl-kdd's mixture threshold rose 3.3x and caught fell 82.6 ->
    75.1 % (benchmarks/results/mixture-threshold-colluders.md)."""
    used, curve, _ = exceedance_curve(histograms, weight, trim, colluders)
    return crossing(used, curve, 1 - q)


def fleet_tail(histograms: list[tuple[np.ndarray, np.ndarray]], weight: np.ndarray, q: float, trim: float,
               holdout: float, colluders: int = 1) -> tuple[float, Tail]:
    """The fleet's threshold (`exceedance_threshold`, read from the same curve) and what each device needs to
    shrink its own threshold toward it (`models.detection.threshold.shrunk_threshold`): the fleet's exceedance curve at
    levels a factor 16 either side of 1 - q, and how much that curve counts for against a device's own records.
    The weight is the empirical-Bayes (beta-binomial method of moments) prior strength of the devices' shares
    above the fleet's threshold: the more their shares differ beyond what their record counts explain, the
    more each device's own records count. It is kept between 1 / (1 - q) records' worth (one expected
    exceedance: a handful of records never decides alone) and 16 times that (a device whose own records flag
    far more than promised moves even when the fleet as a whole does not differ, as a lone odd device in a
    small fleet). The spread is a winsorised weighted one, so one device cannot make every other device trust
    its own records more."""
    used, curve, dense = exceedance_curve(histograms, weight, trim, colluders)
    fleet = crossing(used, curve, 1 - q)
    n = dense.sum(axis=1)
    rates = dense[:, EDGES[used] >= fleet].sum(axis=1) / n  # each device's share of records above the threshold
    w = np.asarray(weight, dtype=float)[np.array([int(np.sum(c)) > 0 for _, c in histograms], dtype=bool)]
    m1, m2, chance = winsorized_weighted_mean(np.c_[rates, rates**2, 1 / n], w, trim, colluders, colluders)
    return tail_of(used, curve, fleet, (m1, m2, chance, float(np.sum(rates * n) / np.sum(n))), q, holdout)


def tail_of(used: np.ndarray, curve: np.ndarray, fleet: float, rates: tuple[float, float, float, float], q: float,
            holdout: float) -> tuple[float, Tail]:
    """`fleet_tail`'s answer from the exceedance curve, the fleet's threshold read from it, and what the devices'
    shares above that threshold are: (their weighted mean, the mean of their squares, the mean of 1 / records,
    the pooled share), however they were combined (winsorised, or summed in private mode)."""
    levels = tail_levels(q)
    thresholds = np.array([crossing(used, curve, level) for level in levels])
    m1, m2, chance, p = rates
    spread = m2 - m1**2 - p * (1 - p) * chance  # between-device variance beyond sampling noise
    estimate = p * (1 - p) / spread - 1 if spread > 0 and p > 0 else np.inf
    return fleet, Tail(thresholds, levels, float(np.clip(estimate, 1 / (1 - q), TAIL_SPAN / (1 - q))), holdout)


def exceedance_curve(histograms: list[tuple[np.ndarray, np.ndarray]], weight: np.ndarray,
                     trim: float, colluders: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid bins some device has errors in, the winsorised weighted mean over devices of the share of each
    device's records above each of them (`colluders` devices left out at the top, as many winsorised at each
    side), and the devices' dense counts (devices with records only)."""
    some = np.array([int(np.sum(c)) > 0 for _, c in histograms], dtype=bool)
    if not some.any():
        raise ValueError("no errors to take a quantile of")
    used = np.unique(np.concatenate([np.asarray(b, dtype=np.int64) for (b, _), s in zip(histograms, some) if s]))
    dense = np.zeros((int(some.sum()), len(used)))
    for row, (b, c) in enumerate(h for h, s in zip(histograms, some) if s):
        dense[row, np.searchsorted(used, b)] = c
    # share of each device's records in bins above each used bin
    above = 1.0 - np.cumsum(dense, axis=1) / dense.sum(axis=1, keepdims=True)
    return used, winsorized_weighted_mean(above, np.asarray(weight, dtype=float)[some], trim, colluders,
                                          colluders), dense


def crossing(used: np.ndarray, curve: np.ndarray, level: float) -> float:
    """The error at which an exceedance curve over grid bins falls to `level`, interpolated geometrically."""
    i = int(np.searchsorted(-curve, -level, side="left"))  # first bin whose exceedance is <= level
    i = min(i, len(used) - 1)
    before = curve[i - 1] if i > 0 else 1.0
    frac = (before - level) / (before - curve[i]) if before > curve[i] else 1.0
    lo, hi = EDGES[used[i]], EDGES[used[i] + 1]
    return float(lo * (hi / lo) ** float(np.clip(frac, 0.0, 1.0)))


@dataclass
class Federation:
    """What the statistics phase establishes: the standardisation, each device's weight (mean 1), and the
    diagonal of its C_i and bound on its trace that later uploads are checked against."""

    mean: np.ndarray
    scale: np.ndarray
    weight: np.ndarray
    diag: np.ndarray
    trace: np.ndarray
    caps: WeightCaps  # what makes each device's claimed count its weight (the pipeline's cap stage)
    count: np.ndarray  # the records each device claimed


def stack_summaries(summaries: list[tuple[int, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-device (count, sum, sum of squares) tuples as the stacked arrays the functions here take."""
    return (np.array([s[0] for s in summaries], dtype=float), np.stack([s[1] for s in summaries]),
            np.stack([s[2] for s in summaries]))


def federation_statistics(count: np.ndarray, total: np.ndarray, sumsq: np.ndarray, guard: Guard) -> Federation:
    """From the devices' (count, sum, sum of squares), stacked (n,), (n, d), (n, d), already checked."""
    caps = weight_caps(count, guard)
    weight = caps.apply(count)
    mean, scale, diag = robust_standardisation(count, total, sumsq, weight, guard.influence)
    return Federation(mean, scale, weight, diag, diag.sum(axis=1), caps, np.asarray(count, dtype=float))


def model_problem(Z: np.ndarray, mean: np.ndarray, scale: np.ndarray, threshold: float) -> str | None:
    """Why a finished PCA model must not be promoted, or None: non-finite numbers, a basis that is not
    orthonormal, a threshold off the histogram grid."""
    if not (np.isfinite(Z).all() and np.isfinite(mean).all() and np.isfinite(scale).all()):
        return "non-finite numbers in the model"
    if (scale <= 0).any():
        return "non-positive feature scales"
    if np.abs(Z.T @ Z - np.eye(Z.shape[1])).max() > 1e-6:
        return "the basis is not orthonormal"
    if not EDGES[0] < threshold < EDGES[-1]:
        return f"threshold {threshold!r} outside the error grid ({EDGES[0]:g}..{EDGES[-1]:g})"
    return None
