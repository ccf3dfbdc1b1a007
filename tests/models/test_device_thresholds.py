"""Per-device thresholds shrunk toward the fleet's (models.detection.screening.fleet_tail on the coordinator,
models.detection.threshold.shrunk_threshold on each device): a device moves only as far as its own held-out records
justify, never past the published tail, and one device cannot make the others trust themselves more."""

from __future__ import annotations

import numpy as np
import pytest

from models.detection.screening import exceedance_threshold, fleet_tail
from models.detection.threshold import Tail, shrunk_threshold, sparse_histogram

Q = 0.985


def fleet(rng, devices=40, n=400, odd=()):
    """Held-out scores of devices drawn from one distribution; the `odd` devices' traffic scores twice as
    high (their normal traffic is the kind the shared model fits worst)."""
    return [rng.lognormal(1.0, 0.5, n) * (2.0 if i in odd else 1.0) for i in range(devices)]


def tail_of(scores, trim=0.01):
    hists = [sparse_histogram(s) for s in scores]
    w = np.ones(len(scores))
    threshold, tail = fleet_tail(hists, w, Q, trim, 0.2)
    assert threshold == exceedance_threshold(hists, w, Q, trim)  # the same curve, read once
    return threshold, tail


def test_a_device_whose_traffic_scores_high_raises_its_threshold_and_flags_about_the_promised_share():
    rng = np.random.default_rng(0)
    scores = fleet(rng, odd=range(8))
    T, tail = tail_of(scores)
    assert tail.prior < 1 / (1 - Q) * 16  # the devices differ beyond chance: their own records count
    fresh = fleet(np.random.default_rng(1), odd=range(8))  # the same devices' next normal traffic
    fleet_rate = np.mean([np.mean(f > T) for f in fresh[:8]])
    own = [shrunk_threshold(s, T, tail, Q) for s in scores]
    own_rate = np.mean([np.mean(f > t) for f, t in zip(fresh[:8], own[:8])])
    assert fleet_rate > 0.05  # one threshold for all: the odd devices flag several times the promise
    assert own_rate < 0.035 and all(t > T for t in own[:8])
    assert np.mean([np.mean(f > t) for f, t in zip(fresh[8:], own[8:])]) < 0.02  # the others stay near 1.5 %


def test_a_device_with_few_records_stays_near_the_fleet_and_never_leaves_the_tail():
    rng = np.random.default_rng(2)
    T, tail = tail_of(fleet(rng, odd=range(8)))
    few = rng.lognormal(1.0, 0.5, 5) * 2.0
    assert abs(np.log(shrunk_threshold(few, T, tail, Q) / T)) < abs(np.log(shrunk_threshold(
        rng.lognormal(1.0, 0.5, 400) * 2.0, T, tail, Q) / T))
    lo, hi = tail.thresholds[0], tail.thresholds[-1]
    assert shrunk_threshold(np.full(1000, 1e6), T, tail, Q) == pytest.approx(hi)  # cannot switch itself off
    assert shrunk_threshold(np.full(1000, 1e-6), T, tail, Q) >= lo  # nor flag everything
    assert shrunk_threshold(np.array([]), T, tail, Q) == T and shrunk_threshold(few, T, None, Q) == T


def test_one_device_cannot_make_the_others_trust_their_own_records_more():
    rng = np.random.default_rng(3)
    scores = fleet(rng)
    _, honest = tail_of(scores)
    liar = np.r_[scores[-1][:200], np.full(200, 1e3)]  # half its records far above the threshold
    _, lied = tail_of([*scores[:-1], liar])
    assert lied.prior == pytest.approx(honest.prior, rel=0.05)
    _, untrimmed = tail_of([*scores[:-1], liar], trim=0.0)
    assert untrimmed.prior < honest.prior / 2  # what the winsorised spread prevents


def test_the_tail_travels_with_the_model_and_a_malformed_one_is_refused():
    _, tail = tail_of(fleet(np.random.default_rng(4), odd=range(8)))
    back = Tail.from_meta(tail.to_meta())
    np.testing.assert_array_equal(back.thresholds, tail.thresholds)
    assert back.prior == tail.prior and back.holdout == tail.holdout
    for bad in ({"thresholds": tail.thresholds[::-1].tolist()}, {"exceedances": [2.0] * len(tail.thresholds)},
                {"prior": -1.0}, {"prior": float("nan")}, {"holdout": 1.5}, {"thresholds": [1.0]}):
        with pytest.raises(ValueError, match="tail"):
            Tail.from_meta({**tail.to_meta(), **bad})
