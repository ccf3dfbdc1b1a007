"""The closed forms and gradients the recommendation algorithms are built from."""

import numpy as np
import pytest

from models.recsys.batch import Groups, RatingBatch
from models.recsys.data import client_arrays, split_users
from models.recsys.factors import (
    grouped_grams,
    largest_eigenvalue,
    normal_equations,
    predict_pairs,
    prox_step,
    ridge_solve,
    soft_threshold,
)
from models.recsys.synthetic import generate_ratings


def test_l2_closed_form_66_is_the_minimiser_of_its_linearised_subproblem(rng):
    X, g = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    L, lam = rng.uniform(0.5, 3, 6), 0.7
    Z = prox_step(X, g, L, lam, "l2")
    # gradient of <g, Z> + L/2 |Z - X|^2 + lam/2 |Z|^2 vanishes at the closed form
    np.testing.assert_allclose(g + L[:, None] * (Z - X) + lam * Z, 0, atol=1e-12)


def test_repeated_l2_steps_converge_to_the_direct_least_squares_solution(rng):
    D, t, lam = rng.normal(size=(30, 5)), rng.normal(size=30), 0.8
    G, rhs = D.T @ D, D.T @ t
    x = np.zeros((1, 5))
    L = largest_eigenvalue(G[None])
    for _ in range(2000):
        x = prox_step(x, x @ G - rhs, L, lam, "l2")
    direct = np.linalg.lstsq(np.vstack([D, np.sqrt(lam) * np.eye(5)]), np.r_[t, np.zeros(5)], rcond=None)[0]
    np.testing.assert_allclose(x[0], direct, atol=1e-8)
    np.testing.assert_allclose(ridge_solve(G[None], rhs[None], lam)[0], direct, atol=1e-10)


def test_soft_threshold_matches_its_definition_and_is_the_l1_proximal_map(rng):
    Q = rng.normal(size=(50,)) * 2
    tau = 0.6
    expected = [np.sign(q) * max(abs(q) - tau, 0.0) for q in Q]
    np.testing.assert_array_equal(soft_threshold(Q, tau), expected)
    # (71): S(X - g/L, lam/L) minimises <g, z> + L/2 (z - x)^2 + lam |z|, checked on a fine grid per entry
    x, g, L, lam = rng.normal(size=5), rng.normal(size=5), rng.uniform(0.5, 2, 5), 0.4
    z = prox_step(x[:, None], g[:, None], L, lam, "l1")[:, 0]
    grid = np.linspace(-5, 5, 200001)
    for i in range(5):
        f = g[i] * grid + L[i] / 2 * (grid - x[i]) ** 2 + lam * np.abs(grid)
        assert abs(grid[np.argmin(f)] - z[i]) < 1e-4


def test_normal_equations_are_those_of_the_biased_model(rng):
    Q = rng.normal(size=(8, 4))  # partner rows [v, c]
    t = rng.normal(size=8)
    G, rhs = normal_equations(Q, t, np.array([0, 3, 8]))
    for g, (s, e) in enumerate([(0, 3), (3, 8)]):
        D = np.column_stack([Q[s:e, :3], np.ones(e - s)])
        np.testing.assert_allclose(G[g], D.T @ D)
        np.testing.assert_allclose(rhs[g], D.T @ (t[s:e] - Q[s:e, 3]))
        # and the ridge solution predicts with u.v + b + c
        P = ridge_solve(G[g][None], rhs[g][None], 0.0)
        direct = np.linalg.lstsq(D, t[s:e] - Q[s:e, 3], rcond=None)[0]
        if e - s >= 4:
            np.testing.assert_allclose(P[0], direct, atol=1e-8)
    assert grouped_grams(Q, np.array([0, 0, 8]))[0].sum() == 0  # empty group


def _batch(seed=0, n_clients=4):
    r = generate_ratings(n_users=24, n_items=40, rank=3, mean_ratings=12, min_ratings=4, seed=seed)
    parts = split_users(r.n_users, n_clients, "random", np.random.default_rng(seed))
    data = client_arrays(r, parts, float(r.rating.mean()))
    return RatingBatch.of(data), data


def test_item_gradient_matches_finite_differences(rng):
    batch, _ = _batch()
    P = rng.normal(size=(batch.n_clients * batch.M, 4))
    Q = rng.normal(size=(batch.n_slots, 4))

    def loss(Q):
        return 0.5 * np.sum(batch.residual(P, Q) ** 2)

    grad = batch.item_side(P).gradient(Q)
    np.testing.assert_allclose(grad, batch.item_gradient(batch.residual(P, Q), P), atol=1e-10)
    eps = 1e-6
    for s, j in [(0, 0), (3, 3), (batch.n_slots - 1, 1), (7, 2)]:
        E = np.zeros_like(Q)
        E[s, j] = eps
        assert abs((loss(Q + E) - loss(Q - E)) / (2 * eps) - grad[s, j]) < 1e-5
    scaled = batch.item_side(P, scale=np.arange(batch.n_slots, dtype=float)).gradient(Q)
    np.testing.assert_allclose(scaled, grad * np.arange(batch.n_slots)[:, None], atol=1e-10)


def test_user_gradient_and_curvature_bound(rng):
    batch, _ = _batch(seed=1)
    P = rng.normal(size=(batch.n_clients * batch.M, 4))
    Q = rng.normal(size=(batch.n_slots, 4))
    G, rhs = batch.user_grams(Q)
    # the Gram form of the gradient equals the sparse form
    np.testing.assert_allclose(np.einsum("nij,nj->ni", G, P) - rhs,
                               batch.user_gradient(batch.residual(P, Q), Q), atol=1e-9)
    # item curvature bounds lambda_max of every item slot's Hessian sum_t [u_t, 1][u_t, 1]'
    L = batch.item_curvature(P)
    E = P.copy()
    E[:, -1] = 1
    for s in range(batch.n_slots):
        raters = batch.rows[batch.cols == s]
        H = E[raters].T @ E[raters]
        assert np.linalg.eigvalsh(H)[-1] <= L[s] + 1e-9


def test_batch_sums_are_the_sparse_products(rng):
    batch, _ = _batch(seed=3, n_clients=5)
    A = np.zeros((batch.n_clients * batch.M, batch.n_slots))  # (users x item slots), dense
    A[batch.rows, batch.cols] = batch.target
    U, V = rng.normal(size=(len(A), 4)), rng.normal(size=(batch.n_slots, 4))
    np.testing.assert_allclose(batch.user_sums(batch.target, V), A @ V, atol=1e-12)
    np.testing.assert_allclose(batch.item_sums(batch.target, U), A.T @ U, atol=1e-12)
    assert np.all(batch.user_sums(batch.target, V)[~batch.user_valid] == 0)  # padding users


@pytest.mark.parametrize("sizes", [[3, 0, 1, 2, 1, 0, 1, 1, 2, 1], [40, 0, 25, 7]], ids=["levels", "segments"])
@pytest.mark.parametrize("weighted", [False, True])
def test_group_sums(sizes, weighted, rng):
    group = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    X, w = rng.normal(size=(len(group), 3)), rng.normal(size=len(group))
    g = Groups(group, len(sizes))
    assert g.levels == (sizes[0] == 3)
    expected = np.zeros((len(sizes), 3))
    for e in range(len(group)):  # each group in its entries' original order, one by one (as CSR)
        expected[group[e]] += w[e] * X[e] if weighted else X[e]
    for _ in range(2):  # the level layout reuses its work arrays: a second call gives the same
        got = g.sum(X[g.order], w[g.order] if weighted else None)
        if g.levels:
            np.testing.assert_array_equal(got, expected)  # same order of additions: same bits
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert np.all(got[np.array(sizes) == 0] == 0)
    np.testing.assert_array_equal(Groups(np.zeros(0, dtype=np.int64), 4).sum(np.zeros((0, 2))), np.zeros((4, 2)))


def test_packed_prediction_is_uv_plus_both_biases(rng):
    P, Q = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    np.testing.assert_allclose(predict_pairs(P, Q), np.sum(P[:, :3] * Q[:, :3], 1) + P[:, 3] + Q[:, 3])


@pytest.mark.parametrize("how", ["random", "activity"])
def test_batch_gather_scatter_roundtrip(how, rng):
    batch, data = _batch(seed=2, n_clients=5)
    X = rng.normal(size=(batch.n_slots, 3))
    padded = batch.scatter(X)
    assert padded.shape == (5, batch.J, 3)
    assert np.all(padded[~data["item_mask"]] == 0)
    np.testing.assert_array_equal(batch.gather(padded), X)
