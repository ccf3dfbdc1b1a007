"""Kernel PCA through random Fourier features: the map, the settings, the lifted detector."""

import numpy as np
import pytest

from models.detection.robust import second_moment
from models.families import job_spec
from models.kernel import RandomFourierFeatures, default_gamma
from models.params import SettingError
from models.partition import partition
from models.pca.detector import PCADetector
from models.pca.simulator import prepare_clients, simulate_pca
from models.synthetic import generate_traffic


def test_the_map_is_regenerated_from_its_four_numbers():
    a, b = RandomFourierFeatures(5, 64, 0.3, seed=11), RandomFourierFeatures.from_params(
        RandomFourierFeatures(5, 64, 0.3, seed=11).params())
    np.testing.assert_array_equal(a.weights_, b.weights_)
    np.testing.assert_array_equal(a.offset_, b.offset_)
    other = RandomFourierFeatures(5, 64, 0.3, seed=12)
    assert not np.allclose(a.weights_, other.weights_)
    # pinned: the draw depends only on PCG64's raw stream, so another numpy (an agent's) draws the same map
    r = RandomFourierFeatures(3, 16, 0.5, seed=7)
    np.testing.assert_allclose(r.weights_[0, :3], [0.9451238028108373, -0.4637125562428498, -0.6967450716793341],
                               rtol=1e-12)
    np.testing.assert_allclose(r.offset_[:2], [3.0927582526635056, 0.808398537975859], rtol=1e-12)


def test_the_map_draws_the_right_distributions():
    r = RandomFourierFeatures(8, 4096, gamma=0.25, seed=0)
    assert r.weights_.std() == pytest.approx(np.sqrt(2 * 0.25), rel=0.02)
    assert abs(r.weights_.mean()) < 0.02
    assert r.offset_.min() >= 0 and r.offset_.max() < 2 * np.pi
    assert r.offset_.mean() == pytest.approx(np.pi, rel=0.05)


def test_inner_products_approximate_the_gaussian_kernel():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 6))
    gamma = 0.2
    F = RandomFourierFeatures(6, 4096, gamma, seed=1).transform(X)
    K = np.exp(-gamma * ((X[:, None] - X[None]) ** 2).sum(-1))
    err = np.abs(F @ F.T - K)
    assert err.mean() < 0.015 and err.max() < 0.08  # the approximation's error shrinks like 1/sqrt(D)


def test_lifted_second_moments_respect_the_a_priori_bounds():
    lift = RandomFourierFeatures(4, 32, 1.0, seed=2)
    C = second_moment(lift.transform(np.random.default_rng(3).standard_normal((500, 4)) * 5))
    assert (np.diag(C) <= lift.diag_bound + 1e-15).all() and np.trace(C) <= lift.trace_bound
    assert lift.transform32(np.ones((2, 4))).dtype == np.float32
    np.testing.assert_allclose(lift.transform32(np.ones((2, 4))), lift.transform(np.ones((2, 4))), atol=1e-6)


def test_default_gamma_is_the_median_heuristic_on_z_scored_records():
    assert RandomFourierFeatures(22, 64).gamma == default_gamma(22) == 1 / 44


@pytest.mark.parametrize(("values", "field"), [
    ({"kernel": "rbf"}, "kernel"),
    ({"kernel": "rff", "kernel_features": 8}, "kernel_features"),
    ({"kernel": "rff", "kernel_features": 5000}, "kernel_features"),
    ({"kernel": "rff", "kernel_gamma": 0}, "kernel_gamma"),
    ({"kernel": "rff", "kernel_gamma": float("inf")}, "kernel_gamma"),
    ({"kernel": "rff", "kernel_features": 64, "rank": 64}, "rank"),
    ({"rank": 3}, "rank"),
])
def test_kernel_settings_are_validated(values, field):
    with pytest.raises(SettingError) as e:
        job_spec("pca", {"features": ["a", "b", "c"], **values})
    assert e.value.field == field


def test_a_kernel_job_runs_its_algorithm_on_the_lifted_features():
    spec = job_spec("pca", {"features": ["a", "b", "c"], "kernel": "rff", "kernel_features": 64, "rank": 10,
                            "seed": 4})
    assert spec.make_algorithm().n_features == 64
    assert spec.lift().params() == {"n_features": 3, "n_components": 64, "gamma": 1 / 6, "seed": 4}
    assert job_spec("pca", {"features": ["a", "b", "c"], "rank": 2}).lift() is None


@pytest.fixture(scope="module")
def lifted():
    data = generate_traffic(n_devices=10, records_per_device=200, seed=3)
    parts = [data.X_normal[i] for i in partition(data.X_normal, 8, "noniid", np.random.default_rng(0))]
    lift = RandomFourierFeatures(data.X_normal.shape[1], 128, seed=0)
    clients = prepare_clients(parts, data.feature_names, lift=lift)
    from models.pca.baselines import centralized_pca

    Z = centralized_pca(clients.C, clients.weight, 20)
    return data, PCADetector.from_model(Z, clients.preprocessor, 0.05, lift)


def test_the_lifted_detector_scores_the_lifted_residual(lifted):
    data, det = lifted
    X = data.X_attack[:30]
    F = det.lift_.transform(det.preprocessor_.transform(X))
    R = F - F @ det.components_ @ det.components_.T
    np.testing.assert_allclose(det.score_samples(X), (R**2).sum(1), atol=1e-5)
    assert det.score_samples(X[0]) == pytest.approx(det.score_samples(X)[0], abs=1e-6)


def test_the_lifted_detector_travels_with_its_map(lifted):
    data, det = lifted
    arrays, meta = det.to_wire()
    assert meta["rff"] == det.lift_.params() and arrays["Z"].shape == (128, 20)
    back = PCADetector.from_wire(arrays, meta)
    np.testing.assert_array_equal(back.score_samples(data.X_attack), det.score_samples(data.X_attack))
    again = PCADetector.from_dict(det.to_dict())
    np.testing.assert_array_equal(again.score_samples(data.X_attack), det.score_samples(data.X_attack))
    with pytest.raises(ValueError, match="rows"):
        PCADetector.from_wire({**arrays, "Z": arrays["Z"][:64]}, meta)


def test_the_explanation_is_the_gradient_attribution(lifted):
    data, det = lifted
    x = data.X_normal[:1].copy()
    t = det.preprocessor_.transform(x)[0]

    def score(t_):  # float64 residual of a standardised record
        f = det.lift_.transform(t_[None])[0]
        return float(f @ f - (f @ det.components_) @ (f @ det.components_))

    h = 1e-6
    grad = np.array([(score(t + h * e) - score(t - h * e)) / (2 * h) for e in np.eye(len(t))])
    contrib = np.abs(grad * t)
    top = det.explain(x, top=3)[0]
    expected_order = [det.feature_names_[j] for j in np.argsort(-contrib)[:3]]
    assert [e["feature"] for e in top] == expected_order
    assert top[0]["share"] == pytest.approx(contrib.max() / contrib.sum(), rel=1e-3)
    mean = det.preprocessor_.inverse_transform(np.zeros(len(t)))
    assert top[0]["expected"] == pytest.approx(mean[det.feature_names_.index(top[0]["feature"])])


def test_simulated_kernel_pca_detects_the_synthetic_attacks():
    data = generate_traffic(n_devices=10, records_per_device=200, seed=3)
    parts = [data.X_normal[i] for i in partition(data.X_normal, 10, "noniid", np.random.default_rng(0))]
    X = np.vstack([data.X_normal[:500], data.X_attack])
    y = np.r_[np.zeros(500), np.ones(len(data.X_attack))]
    out = simulate_pca(parts, X, y, data.feature_names, "fedmm", rank=10, rounds=20, fraction=0.5, kernel="rff",
                       kernel_features=64)
    assert out["rff"]["n_components"] == 64 and out["upload_bytes_per_client_round"] == 64 * 16 * 8
    assert out["auc_roc"] > 0.8
    with pytest.raises(ValueError, match="kernel features"):
        simulate_pca(parts, X, y, data.feature_names, "centralized", rank=64, kernel="rff", kernel_features=64)
