"""Private mode's phases around the rounds, for the detectors' simulators (models.mixture.simulator,
models.pca.simulator): the statistics phase and the threshold phase as secure sums (models.private.transport).

Statistics phase. In plaintext mode each device sends its record count, per-feature sum and sum of squares, and
the coordinator checks each device's claims and bounds its influence on the standardisation
(models.detection.screening). In private mode the coordinator learns each device's record count (the weight caps
need every count: the median; a count says how much a device saw, not what), the sum of the devices' weighted
means, then the sum of their weighted mean squares around the fleet's mean: the fleet's mean and scale, the plain
pooled statistics an honest fleet gets in plaintext mode too. What it can no longer do, it cannot check: a
device's claimed sums, or its influence on the scale beyond its capped weight (docs/privacy.md).

With differential privacy (the transport's `noise`, models.private.dp) every device weighs 1 and sends no count, each
sum is noised with its uploads clipped (the statistics to STATS_CLIP per feature, the threshold's histogram to its
shares), and the fleet's size divides the sums (a fixed denominator, as DP-FedAvg's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.detection.attacks import NO_ADVERSARIES, Adversaries
from models.detection.preprocessing import Moments, Preprocessor, constant, signed_log1p
from models.detection.screening import Guard, WeightCaps, crossing, tail_of, value_bound, weight_caps
from models.detection.tail_clip import clip_levels, clip_rank, clipped_floor, coarse_bounds, fine_bounds, level_rows
from models.detection.threshold import EDGES, TAIL_SPAN, Tail, tail_levels
from models.private.fixedpoint import BITS
from models.private.transport import SecureTransport

#: differential privacy's clip of the statistics phase, per feature: a device's mean of log-scaled values and its
#: mean square around the fleet's mean are clipped to this times sqrt(d) in L2 norm
STATS_CLIP = 8.0
#: differential privacy's threshold: the anchor's grid, every COARSE-th edge (8 bins a decade), and how far above
#: it (decades) the candidate thresholds go
COARSE = 64
#: how many coarse bins the anchor's sum (and the window's) has
COARSE_BINS = (len(EDGES) - 1) // COARSE
OFFSET_CLIP = 3.0
#: and the largest exceedance a device reports at a candidate, times 1 - q
TAIL_CAP = 5.0


@dataclass
class Clients:
    """What the devices hold after a private statistics phase: the fleet's standardisation, their standardised
    records, their capped weights, the weight caps and the records each claimed."""

    preprocessor: Preprocessor
    X: list[np.ndarray]
    weight: np.ndarray
    caps: Any  # models.detection.screening.WeightCaps
    claimed: np.ndarray


def largest_weight(caps: Any, claimed: np.ndarray) -> float:
    """The largest capped weight a device can have (at least 1): the clip of its weighted statistics."""
    level = caps.level if np.isfinite(caps.level) else float(np.max(claimed))
    return max(float(level / caps.scale), 1.0)


def private_clients(parts: list[np.ndarray], feature_names: list[str], guard: Guard, transport: SecureTransport,
                    adversaries: Adversaries = NO_ADVERSARIES) -> Clients:
    """The statistics phase with the sums secured: counts in the clear (weight caps), the fleet's weighted mean
    per feature (of signed-log1p records) from a secure sum of every device, each device weighing its own, then
    their weighted mean squares around it from a second; the devices' records standardised with them."""
    d = len(feature_names)
    T = [signed_log1p(np.asarray(p, dtype=float), np.ones(d, bool)) for p in parts]
    claims = adversaries.summaries([Moments.of(t).summary() for t in T], guard.max_records)
    count = np.array([c for c, _, _ in claims], dtype=float)
    if transport.noise is not None:  # differential privacy: every device weighs 1, no count is sent
        return noisy_clients(parts, feature_names, T, claims, count, transport)
    caps = weight_caps(count, guard)
    weight = caps.apply(count)
    m1, m2 = own_moments(claims)
    clip = largest_weight(caps, count)
    everyone = np.arange(len(parts))
    # two secure sums: the fleet's mean, then each device's mean square around it (no cancellation of large sums)
    first = transport.phase(MEAN_SCALES, clip, 1, bits=STATS_BITS)
    mean, W = fleet_mean(first(everyone, mean_uploads(weight, m1)))
    second = transport.phase(CENTRED_SCALES, clip, 2, bits=STATS_BITS)
    centred = second(everyone, centred_uploads(weight, m1, m2, mean))
    transport.phase_bytes += (first.sent[0] + second.sent[0]) * len(parts)  # the phase's bytes count as the job's
    pre = fleet_standardisation(feature_names, mean, centred, W)
    X = [(t - mean) / pre.scale for t in T]
    return Clients(pre, X, weight, caps, count)


#: the statistics phase's secure sums: a 64-bit ring (the bound on log-scaled values is wide, and these are few
#: values), each device's weighted mean over the bound on log-scaled values, its weighted mean square over its square
STATS_BITS = 64
MEAN_SCALES = {"m1": value_bound(True), "w": 1.0}
CENTRED_SCALES = {"c2": value_bound(True) ** 2}


def own_moments(summaries: Sequence[tuple[float, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Each device's mean and mean square per feature of its log-scaled records, from its (count, sum, sum of
    squares) (a batch: one row per device)."""
    n = np.maximum(np.array([c for c, _, _ in summaries], dtype=float), 1.0)[:, None]
    return np.stack([total for _, total, _ in summaries]) / n, np.stack([sumsq for _, _, sumsq in summaries]) / n


def mean_uploads(weight: np.ndarray, m1: np.ndarray) -> dict[str, np.ndarray]:
    """The first secure sum of the statistics phase, per device: its weighted mean, and its weight."""
    weight = np.asarray(weight, dtype=float)
    return {"m1": weight[:, None] * m1, "w": weight}


def fleet_mean(total: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    """The fleet's mean and total weight from the first sum."""
    W = float(total["w"][0])
    return total["m1"][0] / W, W


def centred_uploads(weight: np.ndarray, m1: np.ndarray, m2: np.ndarray, mean: np.ndarray) -> dict[str, np.ndarray]:
    """The second secure sum, per device: its weighted mean square around the fleet's mean."""
    return {"c2": np.asarray(weight, dtype=float)[:, None] * (m2 - 2 * mean * m1 + mean**2)}


def fleet_standardisation(feature_names: list[str], mean: np.ndarray, centred: dict[str, np.ndarray],
                          W: float) -> Preprocessor:
    """The fleet's standardisation (signed log1p of every feature, then the mean and scale) from the two sums."""
    scale = np.sqrt(np.maximum(centred["c2"][0] / W, 0.0))
    scale = np.where(constant(mean, scale), 1.0, scale)
    return Preprocessor(list(feature_names), np.ones(len(feature_names), bool), mean, scale)


def noisy_clients(parts: list[np.ndarray], feature_names: list[str], T: list[np.ndarray], claims: list,
                  count: np.ndarray, transport: SecureTransport) -> Clients:
    """`private_clients` with differential privacy: each device's mean, then its mean square around the fleet's
    mean, clipped to `stats_clip` and summed with the Gaussian noise; over the fleet's size."""
    d, n = len(feature_names), len(parts)
    m1, m2 = own_moments(claims)
    everyone = np.arange(n)
    table = noisy_sums(d, 0.5)
    first = table["mean"].transport(transport, 1)
    mean = first(everyone, {"m1": m1})["m1"][0] / n
    second = table["centred"].transport(transport, 2)
    pre = noisy_standardisation(feature_names, mean, second(everyone, centred_uploads(np.ones(n), m1, m2, mean)), n)
    transport.phase_bytes += (first.sent[0] + second.sent[0]) * n
    return Clients(pre, [(t - mean) / pre.scale for t in T], np.ones(n), WeightCaps(1.0, 1.0), count)


@dataclass(frozen=True)
class NoisySum:
    """One sum of a job with differential privacy (models.private.dp), as the simulator and the coordinator both
    announce it: each statistic's shape, its scale (what the secure sum divides it by), its L2 clip, and the ring's
    width. Every device weighs 1, and a scaled value stays within 1 before its share of the noise."""

    shapes: dict[str, tuple[int, ...]]
    scales: dict[str, float]
    clips: dict[str, float]
    bits: int = BITS

    def transport(self, job: SecureTransport, offset: int) -> SecureTransport:
        """The simulator's transport of this sum in a job's transport (`offset`: its seed's, from the job's)."""
        return job.phase(self.scales, 1.0, offset, job.noise.ledger.noise(self.clips),  # type: ignore[union-attr]
                         bits=self.bits)


def noisy_sums(d: int, q: float) -> dict[str, NoisySum]:
    """The noisy sums every detector job with differential privacy has, over `d` features at threshold quantile
    `q`, by name: the statistics phase's two, the threshold phase's two (the family's own are between)."""
    c = stats_clip(d)
    return {"mean": NoisySum({"m1": (d,)}, NOISY_MEAN_SCALES, {"m1": c}, STATS_BITS),
            "centred": NoisySum({"c2": (d,)}, NOISY_CENTRED_SCALES, {"c2": c}, STATS_BITS),
            "anchor": NoisySum({"h": (COARSE_BINS,)}, {"h": 1.0}, {"h": 1.0}),
            "threshold": NoisySum({"a": (len(candidates_of(1.0)),)}, {"a": 1.0}, {"a": exceedance_clip(q)})}


def noisy_job(d: int, q: float, family: dict[str, NoisySum]) -> dict[str, NoisySum]:
    """Every noisy sum of a detector job with differential privacy, by name, in the order they run: the statistics
    phase's two, the family's own (`family`), the threshold phase's two. How many there are is what the budget
    is calibrated for (the simulator's and the coordinator's, both from here)."""
    base = noisy_sums(d, q)
    return {"mean": base["mean"], "centred": base["centred"], **family, "anchor": base["anchor"],
            "threshold": base["threshold"]}


#: differential privacy's statistics sums: each device's mean (weight 1) over the bound on log-scaled values, its
#: mean square around the fleet's mean over its square
NOISY_MEAN_SCALES = {"m1": value_bound(True)}
NOISY_CENTRED_SCALES = {"c2": value_bound(True) ** 2}


def stats_clip(d: int) -> float:
    """Differential privacy's L2 clip of a device's mean, and of its mean square, over `d` features."""
    return STATS_CLIP * float(np.sqrt(d))


def noisy_standardisation(feature_names: list[str], mean: np.ndarray, centred: dict[str, np.ndarray],
                          devices: int) -> Preprocessor:
    """The fleet's standardisation from the noisy mean and the noisy sum of mean squares around it (over the
    fleet's size): a scale the noise made 0 or negative is 1."""
    scale = np.sqrt(np.maximum(centred["c2"][0] / devices, 0.0))
    scale = np.where(constant(mean, scale) | (scale <= 0), 1.0, scale)
    return Preprocessor(list(feature_names), np.ones(len(feature_names), bool), mean, scale)


def private_tail(histograms: list[tuple[np.ndarray, np.ndarray]], weight: np.ndarray, q: float, holdout: float,
                 transport: SecureTransport, winsor: tuple[float, int] | None = None) -> tuple[float, Tail]:
    """The threshold phase as two secure sums. First the window: each device's weighted share of its held-out scores
    above each bin of the coarse grid (every COARSE-th edge), with its weight (`window_uploads`); the coarse curve
    says between which coarse edges the fleet's curve crosses every level of its tail (`tail_window`). Then, over
    the fine bins of that window only, each device's histogram, its weighted share above each bin, the square of
    that share and its records above each bin, with its weight, weight over records and records (`tail_uploads`).
    The fleet's threshold and tail are read from the second sum as `models.detection.screening.fleet_tail` reads
    them, and equal what one sum over the whole grid gives (`tail_from`).

    `winsor` (plaintext's trim and colluders; None: nothing clipped) bounds each device's influence: the window's
    sum also counts the devices reaching each tail level at each coarse point, and each device clips its shares
    above to the share of the device ranked `clip_rank` (models.detection.tail_clip) before the second sum."""
    if transport.noise is not None:
        return noisy_tail(histograms, q, holdout, transport)
    dense = dense_histograms(histograms)
    everyone = np.arange(len(histograms))
    scales = tail_scales(max(float(dense.sum(axis=1).max()), 1.0))
    first = transport.phase(window_scales(), transport.clip, 3)
    coarse = first(everyone, window_uploads(dense, weight, q if winsor else None))
    bounds = tail_bounds(coarse, q, *winsor) if winsor else None
    held = np.asarray(weight, dtype=float)[dense.sum(axis=1) > 0]
    window = tail_window(coarse, q, bounds, float(held.min()) if len(held) else 0.0)
    second = transport.phase(scales, transport.clip, 4)
    S = second(everyone, tail_uploads(dense, weight, window, bounds))
    transport.phase_bytes += (first.sent[0] + second.sent[0]) * len(histograms)
    return tail_from(S, window, q, holdout)


def dense_histograms(histograms: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The devices' sparse histograms over the whole grid (one row per device)."""
    dense = np.zeros((len(histograms), len(EDGES) - 1))
    for i, (b, c) in enumerate(histograms):
        np.add.at(dense[i], np.asarray(b, dtype=np.int64), np.asarray(c, dtype=float))
    return dense


def tail_scales(most: float) -> dict[str, float]:
    """The threshold's secure sum's scales: counts over the most records a device histograms (the coordinator knows
    every device's count), shares and weights over 1."""
    return {"c": most, "wa": 1.0, "wa2": 1.0, "na": most, "w": 1.0, "wn": 1.0, "n": most}


def window_scales() -> dict[str, float]:
    """The window's secure sum's scales: the threshold's own for the same values (they encode alike in the same
    ring: the two sums agree at the coarse edges); the devices' 0/1 rows of tail levels reached and of records held
    over 1."""
    return {**{k: v for k, v in tail_scales(1.0).items() if k in ("wa", "w")}, "ge": 1.0, "d": 1.0}


def window_shapes(q: float | None) -> dict[str, tuple[int, ...]]:
    """The window's sum's statistics and their shapes (with the quantile `q`, a clipped threshold: the rows of
    levels reached, as many as `clip_levels(q)`)."""
    shapes: dict[str, tuple[int, ...]] = {"wa": (COARSE_BINS,), "w": ()}
    return shapes if q is None else {**shapes, "ge": (COARSE_BINS, len(clip_levels(q))), "d": ()}


def _shares_above(dense: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per device: its weight (0 without records), its records, and its share of records above each bin."""
    n = dense.sum(axis=1)
    some = n > 0
    w = np.where(some, np.asarray(weight, dtype=float), 0.0)
    above = 1.0 - np.cumsum(dense, axis=1) / np.maximum(n, 1.0)[:, None]
    above[~some] = 0.0
    return w, n, above


def window_uploads(dense: np.ndarray, weight: np.ndarray, q: float | None = None) -> dict[str, np.ndarray]:
    """The window's sum, per device: its weighted share above each coarse bin (above the fine bin under each
    COARSE-th edge), and its weight; with the quantile `q` (a clipped threshold), its 0/1 rows of the tail's levels
    its share above reaches at each coarse bin (models.detection.tail_clip.level_rows) and 1 if it holds records."""
    w, n, above = _shares_above(dense, weight)
    points = above[:, COARSE - 1:: COARSE]
    out = {"wa": w[:, None] * points, "w": w}
    if q is not None:
        out.update(ge=level_rows(points, q), d=(n > 0).astype(float))
    return out


def tail_bounds(total: dict[str, np.ndarray], q: float, trim: float, colluders: int) -> np.ndarray:
    """From the window's sum: at each coarse bin the bound every device clips its share above to (the
    `clip_rank`-th highest device's, to within a level; models.detection.tail_clip)."""
    rank = clip_rank(int(round(float(total["d"][0]))), trim, colluders)
    return coarse_bounds(total["ge"][0], q, rank)


#: coarse bins the window keeps beyond where the fleet's curve crosses its tail's levels, either side (room for a
#: device that leaves between the two sums of a job)
WINDOW_MARGIN = 1


def tail_window(total: dict[str, np.ndarray], q: float, bounds: np.ndarray | None = None,
                least_weight: float = 0.0) -> tuple[int, int]:
    """The fine bins [lo, hi) the threshold's sum covers, from the window's sum: the coarse bins from the one where
    the fleet's weighted share above falls to the tail's highest level to the one where it falls to its lowest
    (`models.detection.threshold.tail_levels`), WINDOW_MARGIN more either side, and the fine bin under the window
    (its share above is the fleet's curve just before the window: `tail_from`). Every level is crossed inside.

    With the devices' clip `bounds` the fleet's curve falls sooner: the window starts where a lower bound of the
    clipped curve falls to the highest level (the curve itself where nothing is clipped, a bound of 1, else
    models.detection.tail_clip.clipped_floor, `least_weight` the lightest device's weight), and ends where the
    unclipped curve falls to the lowest."""
    W = max(float(total["w"][0]), 1e-300)
    curve = total["wa"][0] / W
    levels = tail_levels(q)
    floor = curve if bounds is None else np.where(bounds >= 1.0, curve, clipped_floor(total["ge"][0], bounds, q,
                                                                                      least_weight, W))
    below = floor <= levels[0]
    first = int(np.argmax(below)) if below.any() else len(floor)
    last = int(np.searchsorted(-curve, -levels[-1], side="left"))
    first, last = max(first - WINDOW_MARGIN, 0), min(last + WINDOW_MARGIN, COARSE_BINS - 1)
    return (COARSE * first - 1 if first else 0), COARSE * (last + 1)


def tail_uploads(dense: np.ndarray, weight: np.ndarray, window: tuple[int, int] | None = None,
                 bounds: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per device, over the fine bins of `window` (None: the whole grid): its histogram, its weighted share above
    each bin, that share's square, its records above each bin; its weight, weight over records and records. With
    the coarse clip `bounds` (`tail_bounds`), its shares above are clipped to them first (`fine_bounds`)."""
    w, n, above = _shares_above(dense, weight)
    if bounds is not None:
        above = np.minimum(above, fine_bounds(bounds, COARSE)[None, : above.shape[1]])
    lo, hi = window or (0, len(EDGES) - 1)
    above = above[:, lo:hi]
    return {"c": dense[:, lo:hi], "wa": w[:, None] * above, "wa2": w[:, None] * above**2,
            "na": n[:, None] * above, "w": w, "wn": w / np.maximum(n, 1.0), "n": n}


def tail_from(total: dict[str, np.ndarray], window: tuple[int, int] | None, q: float,
              holdout: float) -> tuple[float, Tail]:
    """The fleet's threshold and tail from the threshold's secure sum over the fine bins of `window` (None: the
    whole grid), as `fleet_tail` reads the devices'. The bin under a window is counted as used: its share above is
    the curve at the last used bin below the window (no records between), which the crossings interpolate from;
    the curve there is above every level, so no crossing falls in it."""
    S = {k: v[0] for k, v in total.items()}
    lo = window[0] if window else 0
    used = np.flatnonzero((S["c"] > 0.5) | ((np.arange(len(S["c"])) == 0) & (lo > 0)))
    curve = S["wa"][used] / S["w"]
    used = used + lo
    fleet = crossing(used, curve, 1 - q)
    # the shares above the last bin whose lower edge is below the threshold: of the records at or above it
    at = int(np.searchsorted(EDGES, fleet, side="left")) - 1 - lo
    m1, m2 = (S["wa"][at] / S["w"], S["wa2"][at] / S["w"]) if at + lo >= 0 else (1.0, 1.0)
    p = S["na"][at] / S["n"] if at + lo >= 0 else 1.0
    return tail_of(used, curve, fleet, (float(m1), float(m2), float(S["wn"] / S["w"]), float(p)), q, holdout)


def noisy_tail(histograms: list[tuple[np.ndarray, np.ndarray]], q: float, holdout: float,
               transport: SecureTransport) -> tuple[float, Tail]:
    """`private_tail` with differential privacy, two noisy sums. First an anchor: each device's held-out scores'
    shares in the bins of the coarse grid (`coarse_shares`), summed with the noise (`anchor_of`). Then each device's
    share of scores above candidates around the anchor (`exceedances`), summed with the noise: the fleet's threshold
    where the noisy exceedance crosses 1 - q (`noisy_threshold`)."""
    n_dev = len(histograms)
    table = noisy_sums(1, q)
    first = table["anchor"].transport(transport, 3)
    h = first(np.arange(n_dev), {"h": np.stack([coarse_shares(x) for x in histograms])})
    anchor = anchor_of(h, first.noise.std("h"), q, n_dev)  # type: ignore[union-attr]
    second = table["threshold"].transport(transport, 4)
    total = second(np.arange(n_dev), {"a": np.stack([exceedances(x, anchor, q) for x in histograms])})
    transport.phase_bytes += (first.sent[0] + second.sent[0]) * n_dev
    return noisy_threshold(total, anchor, q, n_dev, holdout)




def coarse_shares(histogram: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """A device's share of its held-out scores in each bin of the coarse grid (every COARSE-th edge): L2 norm at
    most 1, the anchor's clip."""
    shares = np.zeros(COARSE_BINS)
    b, c = histogram
    np.add.at(shares, np.asarray(b, dtype=np.int64) // COARSE, np.asarray(c, dtype=float))
    return shares / max(shares.sum(), 1.0)


def anchor_of(total: dict[str, np.ndarray], std: float, q: float, devices: int) -> float:
    """The anchor: the top of the highest coarse bin holding more than 1 - q of the fleet 3 noise standard
    deviations out of the noise (where the fleet's scores still are)."""
    h = total["h"][0]
    standing = np.flatnonzero(h > 3 * std + (1 - q) * devices)
    return float(EDGES[COARSE * (int(standing[-1]) + 1 if len(standing) else COARSE_BINS)])


def candidates_of(anchor: float) -> np.ndarray:
    """The candidate thresholds: a decade below the anchor to OFFSET_CLIP decades above it, 8 a decade."""
    return anchor * 10.0 ** (np.arange(-8, 8 * OFFSET_CLIP + 1) / 8)


def exceedance_clip(q: float) -> float:
    """The L2 clip of a device's exceedances: each is cut at TAIL_CAP (1 - q) (only where the curve crosses 1 - q
    matters), which bounds the vector's norm (the clip never binds)."""
    return TAIL_CAP * (1 - q) * float(np.sqrt(len(candidates_of(1.0))))


def exceedances(histogram: tuple[np.ndarray, np.ndarray], anchor: float, q: float) -> np.ndarray:
    """A device's share of held-out scores above each candidate (bins whose lower edge is at or above it), cut at
    TAIL_CAP (1 - q)."""
    candidates = candidates_of(anchor)
    b, c = histogram
    c = np.asarray(c, dtype=float)
    lower = EDGES[np.asarray(b, dtype=np.int64)]
    above = (c[None, :] * (lower[None, :] >= candidates[:, None])).sum(axis=1) / max(c.sum(), 1.0)
    return np.minimum(above, TAIL_CAP * (1 - q))


def noisy_threshold(total: dict[str, np.ndarray], anchor: float, q: float, devices: int,
                    holdout: float) -> tuple[float, Tail]:
    """The fleet's threshold from the noisy sum of exceedances: the curve (over the fleet's size) made
    non-increasing, and where it crosses 1 - q (interpolated geometrically). The curve around it is not released:
    exceedance taken inversely proportional to the score there, and the strongest prior (a device's own threshold
    stays near the fleet's; models.detection.screening.tail_of)."""
    candidates = candidates_of(anchor)
    curve = np.minimum.accumulate(total["a"][0] / devices)
    i = int(np.searchsorted(-curve, -(1 - q), side="left"))  # the first candidate the fleet's tail is below
    if i == 0 or i == len(candidates):
        fleet = float(candidates[min(i, len(candidates) - 1)])
    else:
        frac = (curve[i - 1] - (1 - q)) / max(curve[i - 1] - curve[i], 1e-12)
        fleet = float(candidates[i - 1] * (candidates[i] / candidates[i - 1]) ** np.clip(frac, 0.0, 1.0))
    levels = tail_levels(q)
    return fleet, Tail(fleet * (1 - q) / levels, levels, TAIL_SPAN / (1 - q), holdout)
