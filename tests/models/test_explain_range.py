"""An explanation's expected values lie within the range of each feature the device trained on (issue 24, point 8):
a reconstruction or conditional mean below 0 for a count, or beyond any normal value, is shown as the nearest value
the device's normal traffic had. Devices learn the range when they make a model their own (edge_agent.agent
Agent.fit_to_device: `see`); without it (simulators, pooled detectors) the model's own value is shown."""

from __future__ import annotations

import numpy as np
import pytest

from models.mixture.detector import MixtureDetector
from models.pca.detector import PCADetector


def counts(n: int, seed: int = 0) -> np.ndarray:
    """Non-negative counts: two correlated byte counts, packets, and a feature that is 0 most of the time."""
    rng = np.random.default_rng(seed)
    a = rng.lognormal(5, 1, n)
    return np.c_[a, 3 * a * rng.lognormal(0, 0.1, n), rng.poisson(4, n), (rng.random(n) < 0.05) * rng.poisson(50, n)]


@pytest.mark.parametrize("make", [lambda: PCADetector(rank=1, quantile=0.99),
                                  lambda: MixtureDetector(components=2, quantile=0.99)])
def test_expected_values_stay_within_what_the_device_saw(make):
    X = counts(2000)
    det = make().fit(X, ["src_bytes", "dst_bytes", "pkts", "rare"])
    odd = np.array([[1e7, 10.0, 0.0, 0.0], [0.0, 1e6, 400.0, 900.0]])  # far outside the normal traffic
    lo, hi = X.min(axis=0), X.max(axis=0)
    names = det.feature_names_
    outside = [f for row in det.explain(odd, top=4) for f in row
               if not lo[names.index(f["feature"])] <= f["expected"] <= hi[names.index(f["feature"])]]
    assert outside  # the model's own expected values leave the normal range (a count below 0, or beyond any)
    det.see(iter([X[:1000], X[1000:]]))  # a device's training records, a block at a time
    for row in det.explain(odd, top=4):
        for f in row:
            j = names.index(f["feature"])
            assert lo[j] <= f["expected"] <= hi[j], f
    assert det.seen_ is not None and np.array_equal(det.seen_[0], lo) and np.array_equal(det.seen_[1], hi)


def test_a_device_with_no_records_keeps_the_models_values():
    det = PCADetector(rank=1).fit(counts(500), ["a", "b", "c", "d"])
    det.see(iter([np.empty((0, 4))]))
    assert det.seen_ is None
    x = np.array([[1e7, 10.0, 0.0, 0.0]])
    assert det.within_seen(np.array([[-5.0, 1.0, 2.0, 3.0]])).tolist() == [[-5.0, 1.0, 2.0, 3.0]]
    assert det.explain(x)  # unchanged path
