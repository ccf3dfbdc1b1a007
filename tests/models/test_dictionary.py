"""Federated dictionary learning (models.dictionary): the paper's oracles and the server's checks."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from models.core.pipeline import close_round
from models.dictionary.codes import lasso_codes, objective_terms
from models.dictionary.fedmm import FedMMDictionary, dictionary, project


def sparse_data(n_clients: int = 4, per: int = 60, p: int = 12, K: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Z = theta* h with h 20 % non-zero (seed 003 Sec. 6), split unevenly across clients by its first feature."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((p, K))
    H = rng.standard_normal((n_clients * per, K)) * (rng.random((n_clients * per, K)) < 0.2)
    Z = H @ theta.T + 0.05 * rng.standard_normal((n_clients * per, p))
    Z = Z[np.argsort(Z[:, 0])]
    cuts = np.sort(rng.choice(np.arange(20, len(Z) - 20), n_clients - 1, replace=False))
    return np.split(Z, cuts)


def run_fed(alg: FedMMDictionary, parts: list[np.ndarray], rounds: int, ids_each_round=None):
    rng = np.random.default_rng(1)
    server, _ = alg.init_server(len(parts), rng)
    weight = np.array([len(x) for x in parts], dtype=float)
    server, broadcast = alg.attach_fleet(server, weight, 1.0)
    data = {"X": np.empty(len(parts), dtype=object)}
    for i, x in enumerate(parts):
        data["X"][i] = x
    states = alg.init_clients(data, broadcast)
    for r in range(rounds):
        ids = np.arange(len(parts)) if ids_each_round is None else ids_each_round(r)
        sub = {k: v[ids] for k, v in states.items()}
        new, up = alg.client_update(sub, {"X": data["X"][ids]}, broadcast)
        for k in states:
            states[k][ids] = new[k]
        server, broadcast = close_round(alg, server, ids, up, weight[ids])
    return server, broadcast


def batch_alternating(Z: np.ndarray, theta: np.ndarray, lam: float, eta: float, rounds: int) -> np.ndarray:
    """Dense batch alternating minimisation: codes of every record under theta, then theta = T(S) of the pooled S."""
    for _ in range(rounds):
        H = lasso_codes(Z, theta, lam, 1000, 1e-14)
        theta = (Z.T @ H / len(Z)) @ np.linalg.inv(H.T @ H / len(Z) + 2 * eta * np.eye(H.shape[1]))
    return theta


def test_full_participation_exact_step_equals_batch_alternating_minimisation():
    parts = sparse_data()
    # exact expectations: every record's codes solved to convergence on both sides
    alg = FedMMDictionary(12, atoms=5, lam=0.1, eta=0.2, gamma=1.0, alpha=0.3, code_steps=1000, tol=1e-14)
    _, broadcast = run_fed(alg, parts, 15)
    _, b0 = alg.init_server(len(parts), np.random.default_rng(1))
    want = batch_alternating(np.vstack(parts), b0["theta"], 0.1, 0.2, 15)
    assert np.abs(broadcast["theta"] - want).max() < 1e-9
    # and it learned something: the objective fell from the random start
    Z = np.vstack(parts)
    loss = [objective_terms(Z, lasso_codes(Z, t, 0.1), t, 0.1).mean() for t in (b0["theta"], want)]
    assert loss[1] < 0.5 * loss[0]


def test_codes_equal_scikit_learn_sparse_encode():
    import sklearn.decomposition as sklearn  # the server extra (installed by the test set-up); a reference only
    rng = np.random.default_rng(3)
    theta = rng.standard_normal((12, 6))
    Z = rng.standard_normal((40, 12))
    for lam in (0.05, 0.5):
        ours = lasso_codes(Z, theta, lam, steps=5000, tol=1e-12)
        # sklearn's lasso_cd minimises 1/(2 n_features) ||z - D'h||^2 + (alpha / n_features) ||h||_1 after dividing
        # alpha by n_features: the same minimiser as 1/2 ||z - theta h||^2 + lam ||h||_1 with alpha = lam
        ref = sklearn.sparse_encode(Z, theta.T, algorithm="lasso_cd", alpha=lam, max_iter=10000)
        assert np.abs(ours - ref).max() < 1e-5
        assert (ours != 0).any() and (ours == 0).any()


def test_partial_participation_is_unbiased_over_the_samples():
    """With p = 1/2, the mean over every sample of half the clients of one server step equals the step with all of
    them (the 1/p of Alg. 2 line 13); mu_i weighs clients by their records."""
    parts = sparse_data(n_clients=4)
    weight = np.array([len(x) for x in parts], dtype=float)
    alg = FedMMDictionary(12, atoms=5, gamma=1.0, alpha=0.0)
    server, _ = alg.init_server(4, np.random.default_rng(1))
    data = {"X": np.empty(4, dtype=object)}
    for i, x in enumerate(parts):
        data["X"][i] = x
    fresh = lambda: {k: v.copy() for k, v in server.items()}  # noqa: E731
    full, b_full = alg.attach_fleet(fresh(), weight, 1.0)
    states = alg.init_clients(data, b_full)
    _, up = alg.client_update(states, data, b_full)
    _, want = alg.server_update(full, np.arange(4), up, weight)
    got = []
    for ids in combinations(range(4), 2):
        half, _ = alg.attach_fleet(fresh(), weight, 0.5)
        ids = np.array(ids)
        _, b = alg.server_update(half, ids, {k: v[ids] for k, v in up.items()}, weight[ids])
        got.append(b["S2"])
    assert np.abs(np.mean(got, axis=0) - want["S2"]).max() < 1e-12


def test_projection_keeps_s1_psd_under_8_bit_quantisation():
    parts = sparse_data(n_clients=6, p=12)
    alg = FedMMDictionary(12, atoms=5, bits=8, beta=1.0, alpha=0.1)
    rng = np.random.default_rng(5)
    server, broadcast = run_fed(alg, parts, 30, lambda r: np.sort(rng.choice(6, 3, replace=False)))
    assert np.linalg.eigvalsh(broadcast["S1"])[0] >= -1e-12
    assert int(server["rejected"]) == 0  # quantised honest uploads pass the checks


def test_project_clips_negative_eigenvalues_only():
    A = np.diag([2.0, -1.0, 0.5])
    assert np.allclose(project(A), np.diag([2.0, 0.0, 0.5]))
    theta = dictionary(np.eye(3), np.ones((4, 3)), 0.5)
    assert np.allclose(theta, np.ones((4, 3)) / 2)


def test_screen_refuses_statistics_no_honest_client_sends():
    parts = sparse_data()
    alg = FedMMDictionary(12, atoms=5)
    server, _ = alg.init_server(4, np.random.default_rng(1))
    diag = np.stack([(x**2).mean(axis=0) for x in parts])
    server, broadcast = alg.attach_fleet(server, np.ones(4), 1.0, diag)
    data = {"X": np.empty(4, dtype=object)}
    for i, x in enumerate(parts):
        data["X"][i] = x
    _, up = alg.client_update(alg.init_clients(data, broadcast), data, broadcast)
    assert alg.screen(server, np.arange(4), up).tolist() == [1.0] * 4
    bad = {k: v.copy() for k, v in up.items()}
    bad["S1"][1] -= 5 * np.eye(5)  # S1 not PSD
    bad["S2"][2, 0, 0] += 100.0  # beyond Cauchy-Schwarz
    assert alg.screen(server, np.arange(4), bad).tolist() == [1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("field,value,words", [("atoms", 0, "atoms"), ("lam", 0.0, "l1"), ("bits", 1, "bits"),
                                               ("alpha", 2.0, "control")])
def test_bad_settings_name_the_setting(field, value, words):
    with pytest.raises(ValueError, match=words):
        FedMMDictionary(10, **{field: value})


def test_detector_scores_explains_and_travels():
    from models.detection.preprocessing import Preprocessor
    from models.dictionary.detector import DictionaryDetector
    from wire.model import detector_from_envelope, model_envelope
    from wire.protocol import decode

    parts = sparse_data()
    Z = np.vstack(parts)
    alg = FedMMDictionary(12, atoms=5, gamma=1.0)
    _, broadcast = run_fed(alg, parts, 10)
    theta = broadcast["theta"]
    names = [f"f{j}" for j in range(12)]
    pre = Preprocessor(names, np.zeros(12, bool), np.zeros(12), np.ones(12))
    det = DictionaryDetector.from_model(theta, pre, 1.0, lam=0.1)
    # float32 FISTA with a fixed number of steps scores as the converged float64 loss does
    exact = objective_terms(Z, lasso_codes(Z, theta, 0.1, 5000, 1e-13), theta, 0.1)
    np.testing.assert_allclose(det.score_samples(Z), exact, rtol=1e-3, atol=1e-4)
    assert det.score_samples(Z[0]) == pytest.approx(exact[0], rel=1e-3, abs=1e-4)
    # a record far off the dictionary's span is explained by the feature no atom reproduces
    x = Z[0].copy()
    x[7] += 25.0
    top = det.explain(x)[0][0]
    assert top["feature"] == "f7" and top["share"] > 0.5 and top["value"] == x[7]
    h = lasso_codes(x[None], theta, 0.1, 5000, 1e-13)[0]
    r = x - theta @ h  # the residual: what no atom reproduces
    assert top["share"] == pytest.approx(r[7] ** 2 / (r @ r), abs=1e-2)
    assert top["expected"] == pytest.approx((theta @ h)[7], abs=1e-2)
    assert top["atoms"] and all(0 <= a["atom"] < 5 and a["weight"] > 0 for a in top["atoms"])
    assert det.predict(np.vstack([Z[:3], x]))[-1] == 1
    # the model envelope and the stored dict give the same detector
    back = detector_from_envelope(decode(model_envelope("j", 1, det).encode()))
    np.testing.assert_allclose(back.score_samples(Z), det.score_samples(Z), rtol=0, atol=0)
    again = DictionaryDetector.from_dict(det.to_dict())
    assert again.threshold_ == 1.0 and again.lam == 0.1
    with pytest.raises(ValueError, match="one row per feature"):
        DictionaryDetector.from_model(theta[:5], pre, 1.0)
