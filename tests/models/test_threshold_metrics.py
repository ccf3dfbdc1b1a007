import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from models.detection.metrics import auc_roc, average_precision, f1_score
from models.detection.threshold import error_histogram, federated_quantile, quantile_from_histogram


def test_histogram_quantile_is_close_to_the_exact_one(rng):
    e = rng.lognormal(0, 2, 20_000)
    for q in (0.5, 0.9, 0.99):
        assert abs(federated_quantile([e], q) / np.quantile(e, q) - 1) < 0.01


def test_federated_quantile_equals_pooled_histogram(rng):
    parts = [rng.lognormal(i, 1, 500) for i in range(5)]
    pooled = error_histogram(np.concatenate(parts))
    assert np.array_equal(sum(error_histogram(p) for p in parts), pooled)
    assert federated_quantile(parts, 0.95) == quantile_from_histogram(pooled, 0.95)


def test_quantile_errors():
    with pytest.raises(ValueError, match="no errors"):
        quantile_from_histogram(np.zeros(10), 0.5, np.geomspace(1, 10, 11))
    with pytest.raises(ValueError, match="quantile"):
        federated_quantile([np.ones(3)], 1.5)


def test_metrics_match_scikit_learn_including_ties(rng):
    y = rng.random(400) < 0.3
    s = np.round(rng.random(400) + 0.3 * y, 1)  # many ties
    assert np.isclose(auc_roc(y, s), roc_auc_score(y, s))
    assert np.isclose(average_precision(y, s), average_precision_score(y, s))
    pred = s > 0.7
    tp, fp, fn = (y & pred).sum(), (~y & pred).sum(), (y & ~pred).sum()
    assert np.isclose(f1_score(y, pred), 2 * tp / (2 * tp + fp + fn))
