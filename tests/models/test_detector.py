import numpy as np
import pytest

from models.detection.metrics import auc_roc
from models.pca.detector import PCADetector
from models.synthetic import generate_traffic


@pytest.fixture(scope="module")
def traffic():
    return generate_traffic(n_devices=10, records_per_device=200, seed=3)


@pytest.fixture(scope="module")
def detector(traffic):
    return PCADetector(rank=3, quantile=0.99).fit(traffic.X_normal, traffic.feature_names)


def test_detects_injected_attacks(traffic, detector):
    X = np.vstack([traffic.X_normal, traffic.X_attack])
    y = np.r_[np.zeros(len(traffic.X_normal)), np.ones(len(traffic.X_attack))]
    assert auc_roc(y, detector.score_samples(X)) > 0.8
    # the label-free threshold flags about 1 % of the normal training records
    assert 0.005 < detector.predict(traffic.X_normal).mean() < 0.02


def test_decision_function_and_predict_agree(traffic, detector):
    X = traffic.X_attack[:100]
    assert np.array_equal(detector.predict(X), (detector.decision_function(X) > 0).astype(int))
    assert np.allclose(detector.decision_function(X), detector.score_samples(X) - detector.threshold_)


def test_single_record_scores_like_a_batch(traffic, detector):
    X = traffic.X_attack[:5]
    assert np.allclose([detector.score_samples(x) for x in X], detector.score_samples(X))


def test_a_batch_scores_the_same_bits_in_either_memory_order(traffic, detector):
    """An agent's column selection is in Fortran order, the same records elsewhere in C order. Marking a false
    positive sets the device's threshold to that record's score, so a 1-ulp difference makes it alert again
    (tests/integration/test_feedback.py): equal, not close."""
    X = np.ascontiguousarray(traffic.X_attack[:200])
    assert np.array_equal(detector.score_samples(np.asfortranarray(X)), detector.score_samples(X))
    pair = X[:2]
    assert np.array_equal(detector.score_samples(np.asfortranarray(pair)), detector.score_samples(pair))


def test_score_is_the_squared_residual(traffic, detector):
    X = traffic.X_normal[:20]
    T = detector.preprocessor_.transform(X)
    Z = detector.components_
    direct = np.sum((T - T @ Z @ Z.T) ** 2, axis=1)
    assert np.allclose(detector.score_samples(X), direct)


def test_explanation_names_the_feature_that_is_off(traffic, detector):
    x = traffic.X_normal[0].copy()
    j = traffic.feature_names.index("missed_bytes")
    x[j] = 5e8
    top = detector.explain(x)[0]
    assert top[0]["feature"] == "missed_bytes"
    assert top[0]["value"] == 5e8 and top[0]["expected"] < 1e6
    shares = [t["share"] for t in top]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1.0001


def test_model_round_trips_through_dict(traffic, detector):
    again = PCADetector.from_dict(detector.to_dict())
    assert np.allclose(again.score_samples(traffic.X_attack), detector.score_samples(traffic.X_attack))
    assert again.threshold_ == detector.threshold_


def test_bad_input_is_refused(traffic, detector):
    with pytest.raises(ValueError, match="expected 11 features, got 3"):
        detector.score_samples(np.ones((2, 3)))
    bad = traffic.X_normal.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        PCADetector().fit(bad)
    with pytest.raises(ValueError, match="rank"):
        PCADetector(rank=11).fit(traffic.X_normal)
