"""Private mode's threshold with bounded influence (models.detection.tail_clip): each device clips its share of
held-out scores above each bin to the share of the device ranked `clip_rank`, counted by a secure sum of 0/1 rows."""

import numpy as np
import pytest

from models.detection.private import (
    dense_histograms,
    private_tail,
    tail_bounds,
    tail_from,
    tail_uploads,
    tail_window,
    window_uploads,
)
from models.detection.screening import fleet_tail
from models.detection.tail_clip import clip_rank
from models.detection.threshold import EDGES, sparse_histogram
from models.private.transport import SecureTransport

Q, TRIM, COLLUDERS = 0.985, 0.01, 2


def fleet(seed: int, devices: int = 11, odd: int = 0) -> list[np.ndarray]:
    """Devices' held-out scores: alike, and `odd` of them with 3 % of their records far above the rest (rare
    normal traffic no component of theirs covers)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(devices):
        s = rng.lognormal(np.log(5.0), 0.7, 600)
        if i < odd:
            s[:18] = rng.lognormal(np.log(5e4), 1.0, 18)
        out.append(s)
    return out


def top_bin(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The threshold attack's histogram: every record claimed in the top bin of the grid."""
    return np.array([len(EDGES) - 2]), np.array([len(scores)])


def threshold(hists: list, winsor: tuple[float, int] | None) -> float:
    return private_tail(hists, np.ones(len(hists)), Q, 0.2, SecureTransport({}, 2.0, dropout=1 / 3), winsor)[0]


def test_the_rank_is_one_more_than_the_devices_plaintext_sets_aside_at_the_top():
    assert clip_rank(11, TRIM, COLLUDERS) == 5  # 2 left out, 2 winsorised
    assert clip_rank(100, 0.1, 2) == 12  # 2 left out, 9 winsorised
    assert clip_rank(2, TRIM, COLLUDERS) == 1  # too few to leave any out: the highest (nothing clipped)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_device_reporting_every_score_at_the_top_barely_moves_the_clipped_threshold(seed):
    """The threshold attack in private mode: unclipped, one of 11 devices takes the threshold to the top of the
    grid; clipped, it moves it no more than plaintext's winsorised curve lets it (to within a level)."""
    scores = fleet(seed)
    clean = [sparse_histogram(s) for s in scores]
    attacked = [top_bin(scores[0]), *clean[1:]]
    before = threshold(clean, (TRIM, COLLUDERS))
    after = threshold(attacked, (TRIM, COLLUDERS))
    plaintext = fleet_tail(attacked, np.ones(11), Q, TRIM, 0.2, COLLUDERS)[0]
    assert threshold(attacked, None) > 1e3 * before  # what the clip is for
    assert after == pytest.approx(plaintext, rel=0.05)
    assert after < 1.2 * before


@pytest.mark.parametrize("seed", [0, 1])
def test_devices_with_rare_traffic_far_above_move_the_clipped_threshold_as_plaintexts(seed):
    """4 of 11 honest devices hold a few records scoring 10^4 times the rest (issue 23's small fleets): the plain
    sum's threshold follows them, the clipped one reads plaintext's from the same histograms."""
    hists = [sparse_histogram(s) for s in fleet(seed, odd=4)]
    plaintext = fleet_tail(hists, np.ones(11), Q, TRIM, 0.2, COLLUDERS)[0]
    assert threshold(hists, (TRIM, COLLUDERS)) == pytest.approx(plaintext, rel=0.05)
    assert threshold(hists, None) > 1.2 * plaintext


def test_the_clip_costs_a_fleet_of_alike_devices_little():
    hists = [sparse_histogram(s) for s in fleet(3, devices=40)]
    plain, clipped = threshold(hists, None), threshold(hists, (0.1, COLLUDERS))
    assert clipped <= plain and clipped == pytest.approx(plain, rel=0.05)


@pytest.mark.parametrize("attack", [False, True])
def test_the_clipped_threshold_over_the_window_is_the_one_over_the_whole_grid(attack):
    """Clipped, the fleet's curve falls sooner than the window's sum says: the window starts where a lower bound of
    the clipped curve falls, so its reading is still the whole grid's, exactly (with the attack, the unclipped
    curve never falls to the tail's highest level and would start the window above the crossings)."""
    scores = fleet(4, odd=3)
    hists = [sparse_histogram(s) for s in scores]
    if attack:  # 3 of 11 (the clip leaves out 4): the unclipped curve never falls below 3 / 11
        for i in (5, 6, 7):
            hists[i] = top_bin(scores[i])
    dense = dense_histograms(hists)
    w = np.random.default_rng(6).uniform(0.5, 2.0, size=len(hists))

    def summed(uploads):
        return {k: v.sum(axis=0, keepdims=True) for k, v in uploads.items()}

    coarse = summed(window_uploads(dense, w, Q))
    bounds = tail_bounds(coarse, Q, TRIM, COLLUDERS)
    window = tail_window(coarse, Q, bounds, float(w.min()))
    whole, tail = tail_from(summed(tail_uploads(dense, w, None, bounds)), None, Q, 0.2)
    narrow, narrow_tail = tail_from(summed(tail_uploads(dense, w, window, bounds)), window, Q, 0.2)
    assert narrow == whole and narrow_tail.prior == tail.prior
    np.testing.assert_array_equal(narrow_tail.thresholds, tail.thresholds)
    assert window[0] > 0
