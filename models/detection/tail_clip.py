"""Private mode's threshold with bounded influence (issues 22 and 23, point 3): what a secure sum can do in place of
plaintext's winsorised exceedance curve (models.detection.screening.fleet_tail), which leaves `colluders` devices out
at the top and winsorises more at each side, and which a sum cannot apply (it sees no device's curve). The mixture's
private threshold uses it (models.mixture.simulator, coordinator.mixture_job); private PCA's does not
(models.pca.private: its plaintext threshold is another rule).

The threshold phase's first sum (the window, models.detection.private) also carries, per device and at each point of
the coarse grid, a 0/1 row: whether its share of held-out scores above that point reaches each of 17 levels
(`level_rows`; `clip_levels`: every second level of the fleet's tail, (1 - q) 2^(j/2), a factor 16 either side of
1 - q). Their sum counts, at each point and level, the devices that reach it, and so gives the share above of the
r-th highest device to within half a level's step (`coarse_bounds`: between the lowest level fewer than r devices
reach and the next one down), r being one more than the devices plaintext leaves out or pulls in at the top
(`clip_rank`). Before the second, fine sum, each device clips its own share above each fine bin to that bound,
interpolated geometrically between the coarse points (`fine_bounds`): no device's curve counts above the r-th
highest device's (to within that half step), as in plaintext, and a device reporting every score in the top bin
(the threshold attack) raises the fleet's curve by at most its weight times that bound.

What the coordinator learns beyond the sums it had: how many devices reach each level at each coarse point (a
count of devices, as the support rule's; no device's own curve). A device that breaks the protocol can still send a
row of values other than 0 and 1 (docs/privacy.md: no validity proof on masked inputs).
"""

from __future__ import annotations

import numpy as np

from models.core.aggregation import winsorised_counts
from models.detection.threshold import tail_levels

#: the clip's levels are every CLIP_STEP-th of the tail's (a factor sqrt 2 apart): half the rows of all of them, for
#: thresholds within 2.5 % of all levels' on the held-out histograms of the six private runs of
#: benchmarks/private_small_fleet.py (measured once, before choosing)
CLIP_STEP = 2


def clip_levels(q: float) -> np.ndarray:
    """The levels a device's 0/1 row marks at each coarse point, highest first."""
    return tail_levels(q)[::CLIP_STEP]



def clip_rank(devices: int, trim: float, colluders: int) -> int:
    """Whose share above bounds every device's: the r-th highest of `devices`, r one more than the devices
    plaintext's curve leaves out at the top (`colluders`) and winsorises there (`trim`; at least `colluders`)."""
    top, k = winsorised_counts(devices, trim, colluders, colluders)
    return top + k + 1


def level_rows(points: np.ndarray, q: float) -> np.ndarray:
    """Per device (rows of `points`: its share above each coarse point), 1 where that share reaches each level of
    `clip_levels(q)`, else 0: (devices, points, levels)."""
    return (np.asarray(points, dtype=float)[:, :, None] >= clip_levels(q)[None, None, :]).astype(float)


def coarse_bounds(reached: np.ndarray, q: float, rank: int) -> np.ndarray:
    """At each coarse point, from the summed rows (points, levels: devices reaching each level), the geometric
    middle of the lowest level fewer than `rank` devices reach and the next one down, which `rank` devices reach
    (the rank-th highest share lies between them), 1 where `rank` devices reach every level (nothing clipped), the
    lowest level where none does."""
    levels = clip_levels(q)
    few = np.asarray(reached, dtype=float) < rank - 0.5  # a prefix of the levels (the counts rise as they fall)
    last = few.sum(axis=1) - 1
    # between that level and the next one down (which `rank` devices reach), geometrically: half a step either way
    mid = np.sqrt(levels * np.append(levels[1:], levels[-1]))
    return np.where(last >= 0, mid[np.maximum(last, 0)], 1.0)


def fine_bounds(bounds: np.ndarray, coarse: int) -> np.ndarray:
    """The clip of a device's share above each fine bin: the coarse bounds at their points (every `coarse`-th bin's
    last), interpolated geometrically between them (1 before the first point); non-increasing as they are."""
    bounds = np.asarray(bounds, dtype=float)
    f = np.arange(len(bounds) * coarse)
    c = f // coarse
    before = np.where(c > 0, bounds[np.maximum(c - 1, 0)], 1.0)
    frac = (f % coarse + 1) / coarse
    return before ** (1 - frac) * bounds[c] ** frac


def clipped_floor(reached: np.ndarray, bounds: np.ndarray, q: float, least_weight: float,
                  weight: float) -> np.ndarray:
    """A lower bound on the fleet's clipped curve at each coarse point (where the window must start: the clipped
    curve falls no later than the sum's): every device reaching a level at or under the bound holds at least that
    level, layer by layer, and weighs at least `least_weight` of the total `weight`."""
    levels = clip_levels(q)
    steps = levels - np.append(levels[1:], 0.0)
    under = levels[None, :] <= np.asarray(bounds, dtype=float)[:, None] + 1e-15
    return (np.asarray(reached, dtype=float) * steps[None, :] * under).sum(axis=1) * least_weight / max(weight, 1e-300)
