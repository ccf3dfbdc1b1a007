"""The bound on analysts' false-positive feedback (models.detection.threshold.feedback_cap, feedback_threshold): a
device's threshold rises to cover the records marked normal, never above the fleet's threshold at 1/16 of the
promised false-positive rate (the top of the published tail), so that the fleet's devices still flag at least that
share of their normal traffic however many records are marked, and never goes down."""

from __future__ import annotations

import numpy as np
import pytest

from models.detection.threshold import FEEDBACK_FACTOR, feedback_cap, feedback_threshold, shrunk_threshold
from tests.models.test_device_thresholds import Q, fleet, tail_of


def test_the_cap_is_the_tails_top_where_the_fleet_still_flags_a_sixteenth_of_the_promise():
    scores = fleet(np.random.default_rng(0))
    T, tail = tail_of(scores)
    own = shrunk_threshold(scores[0], T, tail, Q)
    cap = feedback_cap(T, tail, own)
    assert cap == tail.thresholds[-1] > own
    fresh = np.concatenate(fleet(np.random.default_rng(1)))
    assert np.mean(fresh > cap) > (1 - Q) / 16 / 2  # still flagging: feedback cannot switch the detector off
    # an absurd score moves the threshold to the cap, no further, and says it was held back
    after, capped = feedback_threshold(own, np.array([own * 1.1, 1e12]), cap)
    assert after == cap and capped
    # a false positive within the cap: the threshold becomes its score, and it is no longer flagged
    fp = (own + cap) / 2
    after, capped = feedback_threshold(own, np.array([fp]), cap)
    assert after == pytest.approx(fp, rel=1e-8) and not capped and not fp > after
    # nor when scored again a few rounding steps higher (alone, or in a batch of another size or layout)
    for again in (fp * (1 + 4e-16), np.nextafter(np.nextafter(fp, np.inf), np.inf)):
        assert not again > after
    neg = -abs(fp)  # a mixture's score (a negative log-likelihood) can be negative
    after, _ = feedback_threshold(-1e9, np.array([neg]), cap)
    assert not neg * (1 - 4e-16) > after


def test_without_a_tail_the_cap_is_a_factor_of_the_federations_threshold_and_feedback_never_lowers():
    assert feedback_cap(2.0, None, 1.5) == FEEDBACK_FACTOR * 2.0
    assert feedback_cap(2.0, None, 9.0) == 9.0  # a device already above it keeps its own threshold
    assert feedback_threshold(3.0, np.array([1.0]), 4.0) == (3.0, False)  # a score below the threshold: no change
    assert feedback_threshold(3.0, np.zeros(0), 4.0) == (3.0, False)
    assert feedback_threshold(5.0, np.array([6.0]), 4.0) == (5.0, True)  # above the cap already: stays, never lower
