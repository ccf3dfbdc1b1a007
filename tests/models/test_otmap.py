"""The otmap family's math: the ICNN's hand-written derivatives against finite differences, FedMM-OT's aggregation
(mu_i, 1/p), and the learnt map between Gaussians against POT's closed form (the oracle of issue 26, point 2)."""

from __future__ import annotations

import numpy as np
import pytest

from models.otmap.fedmm import ALGORITHMS, FedMMOT
from models.otmap.icnn import Layout, init, potential, potential_grad, project, transport, transport_vjp
from models.otmap.objective import grad_bound, l2_uvp, source_grad, target_terms

EPS = 1e-6


def numeric(fun, v: np.ndarray) -> np.ndarray:
    g = np.zeros_like(v)
    for k in range(v.size):
        e = np.zeros_like(v)
        e[k] = EPS
        g[k] = (fun(v + e) - fun(v - e)) / (2 * EPS)
    return g


@pytest.fixture
def net() -> tuple[Layout, np.ndarray, np.random.Generator]:
    rng = np.random.default_rng(3)
    layout = Layout(3, 5)
    v = project(layout, init(layout, rng, scale=1.0) + 0.3 * rng.standard_normal(layout.size))
    return layout, v, rng


def test_potential_and_map_match_finite_differences(net) -> None:
    layout, v, rng = net
    X, rho = rng.standard_normal((7, 3)), rng.random(7)
    assert np.allclose(potential_grad(layout, v, X, rho), numeric(lambda u: rho @ potential(layout, u, X), v),
                       atol=1e-7)
    by_x = np.stack([(potential(layout, v, X + e) - potential(layout, v, X - e)) / (2 * EPS)
                     for e in EPS * np.eye(3)], axis=1)
    assert np.allclose(transport(layout, v, X), by_x, atol=1e-7)


def test_map_derivatives_match_finite_differences(net) -> None:
    layout, v, rng = net
    X, C = rng.standard_normal((7, 3)), rng.standard_normal((7, 3))
    params, hvp = transport_vjp(layout, v, X, C)
    assert np.allclose(params, numeric(lambda u: np.sum(C * transport(layout, u, X)), v), atol=1e-7)
    by_x = np.stack([(np.sum(C * transport(layout, v, X + e), 1) - np.sum(C * transport(layout, v, X - e), 1))
                     / (2 * EPS) for e in EPS * np.eye(3)], axis=1)
    assert np.allclose(hvp, by_x, atol=1e-7)


def test_target_gradients_match_finite_differences(net) -> None:
    layout, omega, rng = net
    theta = project(layout, init(layout, rng, scale=1.0) + 0.3 * rng.standard_normal(layout.size))
    Y = rng.standard_normal((9, 3))
    _, G_Q, G_theta = target_terms(layout, omega, theta, Y, 0.7)
    assert np.allclose(G_Q, numeric(lambda u: target_terms(layout, u, theta, Y, 0.7)[0], omega), atol=1e-7)
    cycle = lambda u: target_terms(layout, omega, u, Y, 0.7)[0] - target_terms(layout, omega, u, Y, 0.0)[0]  # noqa: E731
    assert np.allclose(G_theta, numeric(cycle, theta), atol=1e-7)


def test_projection_keeps_the_potential_convex(net) -> None:
    layout, _, rng = net
    v = project(layout, rng.standard_normal(layout.size))
    X, C = rng.standard_normal((50, 3)), rng.standard_normal((50, 3))
    assert np.all(np.einsum("ij,ij->i", C, transport_vjp(layout, v, X, C)[1]) >= -1e-12)  # c' H c >= 0


def one_round(alg: FedMMOT, parts: list[np.ndarray], ids: list[int], weight: np.ndarray,
              fraction: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    server, _ = alg.init_server(len(parts), rng)
    server, broadcast = alg.attach_fleet(server, weight, fraction)
    server = alg.attach_target(server, rng.standard_normal((64, 2)) + 1)
    data = {"X": np.empty(len(ids), dtype=object)}
    for j, i in enumerate(ids):
        data["X"][j] = parts[i]
    _, up = alg.client_update({}, data, broadcast)
    return alg.server_update(server, np.array(ids), up, weight[ids])[1]["omega"] - broadcast["omega"]


def test_fedmm_weighs_clients_by_mu_and_rescales_by_one_over_p() -> None:
    """Full participation, no control variates, gamma 1: omega moves by -lr (sum_i mu_i E_i[grad f] + G_Q), mu_i
    the clients' weights over their total; with half the clients sampled, the 1/p rescaling makes the mean step
    over the two possible samples the full one."""
    rng = np.random.default_rng(1)
    parts = [rng.standard_normal((40, 2)), 3 + 2 * rng.standard_normal((40, 2))]
    weight = np.array([1.0, 3.0])
    alg = FedMMOT(2, hidden=4, lr=1e-3, alpha=0.0, server_steps=0)
    full = one_round(alg, parts, [0, 1], weight, 1.0)
    rng = np.random.default_rng(0)
    server, _ = alg.init_server(2, rng)
    Y = rng.standard_normal((64, 2)) + 1  # the same draws as one_round's
    _, G_Q, _ = target_terms(alg.layout, server["omega"], server["theta"], Y, alg.lam)
    grads = [source_grad(alg.layout, server["omega"], x) for x in parts]
    expected = -alg.lr * ((grads[0] + 3 * grads[1]) / 4 + G_Q)
    assert np.allclose(full, expected, atol=1e-12)
    assert not np.allclose(full, -alg.lr * ((grads[0] + grads[1]) / 2 + G_Q), atol=1e-6)  # mu_i matters here
    halves = [one_round(alg, parts, [i], weight, 0.5) for i in (0, 1)]
    assert np.allclose((halves[0] + halves[1]) / 2, full, atol=1e-12)


def test_bad_settings_and_target_are_refused() -> None:
    with pytest.raises(ValueError, match="lr must be > 0"):
        FedMMOT(2, lr=0)
    alg = FedMMOT(2, hidden=4)
    server, _ = alg.init_server(1, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"n x 2"):
        alg.attach_target(server, np.zeros((5, 3)))


def test_map_between_gaussians_matches_pot() -> None:
    """Between two Gaussians the W2 map is affine, A x + b (POT's bures_wasserstein_mapping, from the true means
    and covariances): fedmm-ot on four clients (P's records split by the first feature, exact expectations over
    them and over the server's records of Q) learns it to L2-UVP <= 1 %."""
    ot_gaussian = pytest.importorskip("ot.gaussian")
    rng = np.random.default_rng(0)
    d, n = 2, 1000
    B, C = rng.standard_normal((d, d)) / np.sqrt(d), rng.standard_normal((d, d)) / np.sqrt(d)
    ms, mt = rng.standard_normal(d), rng.standard_normal(d)
    Cs, Ct = B @ B.T + 0.3 * np.eye(d), C @ C.T + 0.3 * np.eye(d)
    A, b = ot_gaussian.bures_wasserstein_mapping(ms, mt, Cs, Ct)
    X = rng.multivariate_normal(ms, Cs, n)
    parts = np.array_split(X[np.argsort(X[:, 0])], 4)
    alg = FedMMOT(d, hidden=8, lr=0.1, server_lr=0.05, batch=n)
    server, _ = alg.init_server(4, rng)
    server, broadcast = alg.attach_fleet(server, np.ones(4), 1.0)
    server = alg.attach_target(server, rng.multivariate_normal(mt, Ct, n))
    data = {"X": np.empty(4, dtype=object)}
    for i, x in enumerate(parts):
        data["X"][i] = x
    X_test = rng.multivariate_normal(ms, Cs, n)
    for _ in range(150):
        _, up = alg.client_update({}, data, broadcast)
        server, broadcast = alg.server_update(server, np.arange(4), up, np.ones(4))
    uvp = l2_uvp(transport(alg.layout, broadcast["omega"], X_test), X_test @ A.T + b)
    assert uvp <= 1.0, uvp


def test_registry_names_the_algorithms() -> None:
    assert set(ALGORITHMS) == {"fedmm-ot", "pseudo-mm", "fedadam"}


def test_moment_start_maps_a_shifted_and_scaled_fleet_onto_q() -> None:
    """P = Q's records scaled and shifted per feature: the moment-matched start is already their map (and theta its
    inverse), before any round, up to the initial hidden part's small contribution."""
    rng = np.random.default_rng(4)
    Y = rng.standard_normal((2000, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -2.0]
    X = 3.0 * Y + [10.0, -5.0, 1.0]
    alg = FedMMOT(3, hidden=4)
    server, _ = alg.init_server(1, rng)
    server = alg.attach_target(server, Y)
    server, broadcast = alg.start_from_moments(server, X.mean(axis=0), X.var(axis=0))
    assert np.allclose(transport(alg.layout, broadcast["omega"], X), Y, atol=0.01)
    assert np.allclose(transport(alg.layout, broadcast["theta"], Y), X, atol=0.01)
    with pytest.raises(ValueError, match="means and variances"):
        alg.start_from_moments(server, X.mean(axis=0)[:2], X.var(axis=0))


def test_the_upload_bound_holds_for_every_record_and_so_for_their_mean():
    layout = Layout(5, 8)
    rng = np.random.default_rng(0)
    omega = project(layout, init(layout, rng, scale=1.0) + 0.3 * rng.standard_normal(layout.size))
    for spread in (0.1, 1.0, 10.0, 100.0):
        X = rng.standard_normal((300, 5)) * spread + spread
        each = np.array([np.linalg.norm(potential_grad(layout, omega, x[None], 1.0)) for x in X])
        assert (each <= grad_bound(layout, omega, (X**2).sum(axis=1))).all()
        assert np.linalg.norm(source_grad(layout, omega, X)) <= grad_bound(layout, omega, (X**2).sum(axis=1).mean())
        # not vacuous: within a small factor of the largest record's gradient
        assert grad_bound(layout, omega, (X**2).sum(axis=1)).max() < 20 * each.max()


def test_the_servers_theta_gradient_is_target_terms_own():
    """The theta steps' shortcut (no value, no G_Q, no parameter gradient in omega) computes the same numbers."""
    from models.otmap.objective import theta_grad

    layout = Layout(6, 8)
    rng = np.random.default_rng(2)
    omega, theta = init(layout, rng, scale=1.0), init(layout, rng, scale=1.0)
    Y = rng.standard_normal((50, 6)) * 2
    np.testing.assert_array_equal(theta_grad(layout, omega, theta, Y, 0.7), target_terms(layout, omega, theta, Y,
                                                                                        0.7)[2])


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_round_whose_every_answer_was_refused_does_not_break_the_server(name):
    alg = ALGORITHMS[name](3, hidden=4, batch=32, server_steps=2)
    rng = np.random.default_rng(0)
    server, _ = alg.init_server(4, rng)
    server, _ = alg.attach_fleet(server, np.ones(4), 0.5)
    server = alg.attach_target(server, rng.standard_normal((64, 3)))
    omega = server["omega"].copy()
    server, broadcast = alg.server_update(server, np.zeros(0, dtype=int), {}, np.zeros(0))
    assert np.isfinite(broadcast["omega"]).all() and np.isfinite(broadcast["theta"]).all()
    if name != "fedmm-ot":  # without answers only FedMM's control variates could move omega (all zero here)
        np.testing.assert_array_equal(broadcast["omega"], omega)


def test_a_feature_constant_on_the_fleet_starts_at_a_shift_not_a_huge_scale():
    """Measured on nsl-kdd: a feature constant in the fleet's records (variance 0) against Q's 1e-4 started the map
    at a scale of 10^4 per unit, and the rounds diverged (gradient norm 7.9e17 by round 5)."""
    alg = FedMMOT(3, hidden=4)
    rng = np.random.default_rng(0)
    server, _ = alg.init_server(2, rng)
    server = alg.attach_target(server, rng.standard_normal((500, 3)) * [1.0, 0.01, 0.01])
    server, broadcast = alg.start_from_moments(server, np.array([0.5, 2.0, 1.0]), np.array([4.0, 0.0, 1e-17]))
    L = np.diag(alg.layout.unpack(broadcast["omega"])["L"])
    assert L[0] == pytest.approx(np.sqrt(np.sqrt(server["Y"][:, 0].var() / 4.0)))
    np.testing.assert_array_equal(L[1:], 1.0)  # constant features: a shift only
    Xh = transport(alg.layout, broadcast["omega"], np.array([[0.5, 2.0, 1.0]]))
    np.testing.assert_allclose(Xh[0, 1:], server["Y"][:, 1:].mean(axis=0), atol=0.01)  # near Q's means
