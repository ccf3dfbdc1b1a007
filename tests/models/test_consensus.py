"""One consensus-ADMM core (models.core.consensus) and its three instances, each checked against a dense reference
written from its paper, one client at a time, with nothing shared with the product but the problem.

The references: FedPG and FedPE (seed 004, Alg. 2 and 1: local steps, upload U_i + Y_i / rho, Z the mean of
the sampled clients' uploads, Y_i <- Y_i + rho (U_i - Z) with the new Z); FedMC-ADMM (seed 000, Alg. 1, l2:
per user the ridge fixed point of (66), against W_i as written or against the V received (the default), N
linearised steps (67) per item column, Y <- Y + rho (W - V) with the V received, V_j = sum_i (rho W_ij +
Y_ij) / (n_j rho + gamma) over every client holding item j, stale ones with their last values, eq. 68)."""

from __future__ import annotations

import numpy as np
import pytest

from models.core.consensus import ConsensusSum, consensus
from models.core.federated import take
from models.core.rounds import run_round
from models.core.sampling import sample_clients
from models.pca import make_algorithm
from models.pca.simulator import prepare_clients
from models.recsys.data import client_data, split_users, stack, train_test_split, unstack
from models.recsys.fedmc_admm import FedMCADMM
from models.recsys.synthetic import generate_ratings


@pytest.mark.parametrize("regularizer", ["none", "l2", "l1"])
def test_the_z_update_minimises_its_objective(regularizer, rng):
    """z = argmin g(z) + sum_i rho/2 (z - m_i / rho)^2, checked per coordinate on a fine grid."""
    rho, gamma = 2.0, 3.0
    m = rng.normal(0, 4, (5, 6))  # 5 clients, 6 coordinates
    z = consensus(m.sum(axis=0), 5, rho, regularizer, gamma)
    grid = np.linspace(-10, 10, 200_001)
    g = {"none": 0 * grid, "l2": gamma / 2 * grid**2, "l1": gamma * np.abs(grid)}[regularizer]
    for j in range(6):
        objective = g + (rho / 2 * (grid[:, None] - m[:, j] / rho) ** 2).sum(axis=1)
        assert abs(z[j] - grid[objective.argmin()]) < 2e-4


def test_running_sums_hold_each_clients_last_message():
    sums = ConsensusSum(np.zeros((4, 2)), np.zeros(4))
    last = {}
    for client, rows, m in ((0, [0, 1], 1.0), (1, [1, 2], 2.0), (0, [0, 1], 5.0)):
        old = last.get(client, np.zeros((2, 2)))
        new = np.full((2, 2), m)
        sums.add(np.array(rows), new - old, client not in last)
        last[client] = new
    np.testing.assert_array_equal(sums.count, [1, 2, 1, 0])
    np.testing.assert_array_equal(sums.total[:, 0], [5, 7, 2, 0])
    np.testing.assert_allclose(sums.z(np.array([1]), rho=1.0), [[3.5, 3.5]])


# -- PCA ----------------------------------------------------------------------------------------------------
D, K, N = 8, 2, 6


@pytest.fixture
def pca_clients(rng):
    B = np.linalg.qr(rng.standard_normal((D, D)))[0]
    spec = np.r_[9, 5, np.full(D - 2, 0.5)]
    parts = [rng.standard_normal((150 + 40 * i, D)) * np.sqrt(spec) @ B.T + 0.4 * i for i in range(N)]
    return prepare_clients(parts, [f"f{j}" for j in range(D)], log_transform=False)


def product_pca(name, clients, rounds, fraction, seed=0):
    alg = make_algorithm(name, D, K, local_steps=5)
    rng = np.random.default_rng(seed)
    server, bc = alg.init_server(N, rng)
    data = {"C": clients.C, "weight": clients.weight}
    states = alg.init_clients(data, bc)
    start, sampled = bc["Z"].copy(), []
    for _ in range(rounds):
        idx = sample_clients(rng, N, fraction)
        done = run_round(alg, server, bc, idx, take(states, idx), take(data, idx), clients.weight[idx])
        server, bc = done.server, done.broadcast
        for k in states:
            states[k][idx] = done.states[k]
        sampled.append(idx)
    return alg, start, sampled, bc["Z"]


def qr_positive(A):
    Q, R = np.linalg.qr(A)
    return Q * np.sign(np.diag(R))


def reference_pca(name, alg, C, w, start, sampled):
    """Seed 004 as written: each client alone, in loops."""
    rho, steps = alg.rho, alg.local_steps
    U = [start.copy() for _ in range(N)]
    Y = [np.zeros((D, K)) for _ in range(N)]
    T = [np.zeros((K, K)) for _ in range(N)]  # FedPE's dual on the surrogate constraint
    Z = start.copy()
    for idx in sampled:
        uploads = []
        for i in idx:
            eta = 1.0 / (alg.curvature * w[i] * np.linalg.eigvalsh(C[i])[-1] + rho)
            u = U[i]
            for _ in range(steps):
                if name == "fedpg":  # Riemannian gradient of the augmented Lagrangian, QR retraction
                    grad = -2 * w[i] * C[i] @ u + Y[i] + rho * (u - Z)  # terms in span(u) vanish below
                    grad = grad - u @ (u.T @ grad)
                    u = qr_positive(u - eta * grad)
                else:  # Euclidean gradient with h(U) = max(0, U'U - I)^2 and its dual T
                    f = -4 * C[i] @ u + 2 * (u @ (u.T @ C[i] @ u) + C[i] @ u @ (u.T @ u))
                    P = np.maximum(u.T @ u - np.eye(K), 0)
                    A = (T[i] + rho * P * P) * 2 * P
                    grad = w[i] * f + Y[i] + rho * (u - Z) + u @ (A + A.T)
                    u = u - eta * grad
            U[i] = u
            uploads.append(u + Y[i] / rho)
        Z = np.mean(uploads, axis=0)  # eq. (8)
        for i in idx:
            Y[i] = Y[i] + rho * (U[i] - Z)  # eq. (9), with the new Z
            if name == "fedpe":
                P = np.maximum(U[i].T @ U[i] - np.eye(K), 0)
                T[i] = T[i] + rho * P * P  # eq. (10)
    return Z


@pytest.mark.parametrize("name", ["fedpg", "fedpe"])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_fedpca_is_the_papers_algorithm(pca_clients, name, fraction):
    alg, start, sampled, Z = product_pca(name, pca_clients, 12, fraction)
    ref = reference_pca(name, alg, pca_clients.C, pca_clients.weight, start, sampled)
    np.testing.assert_allclose(Z, ref, atol=1e-9)


# -- FedMC-ADMM ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("user_items", ["copy", "consensus"])
def test_fedmc_admm_is_the_papers_algorithm(user_items):
    r = generate_ratings(n_users=40, n_items=30, rank=2, mean_ratings=10, seed=5)
    train, _ = train_test_split(r, 0.2, seed=0)
    parts = split_users(train.n_users, 5, "random", np.random.default_rng(1))
    mean = float(train.rating.mean())
    data = client_data(train, parts, mean)
    alg = FedMCADMM(train.n_items, rank=2, rho=3.0, lam=1.0, gamma=2.0, local_steps=3, user_items=user_items)
    rng = np.random.default_rng(0)
    server, bc = alg.init_server(len(parts), rng)
    V0 = bc["item_factors"].copy()
    states = [alg.init_clients(d, bc) for d in data]
    sampled = []
    for _ in range(6):
        idx = sample_clients(rng, len(parts), 0.6)
        old = [states[i] for i in idx]
        done = run_round(alg, server, bc, idx, stack(old), stack([data[i] for i in idx]), np.ones(len(idx)))
        server, bc = done.server, done.broadcast
        for i, s in zip(idx, unstack(done.states, old)):
            states[i] = s
        sampled.append(idx)
    np.testing.assert_allclose(bc["item_factors"], reference_fedmc(alg, data, V0, sampled), atol=1e-9)


def reference_fedmc(alg, data, V0, sampled):
    """Seed 000, Alg. 1 with the l2 closed forms, dense per client over the items it holds; rows are packed
    [factors, bias] (the prediction u.v + b + c, so the design row of either side is [partner factors, 1])."""
    rho, lam, gamma, steps = alg.rho, alg.lam, alg.gamma, alg.local_steps
    V = V0.copy()
    copies, duals = {}, {}  # each client's last W_i and Y_i (on its items)
    for idx in sampled:
        V_received = V.copy()
        for i in idx:
            d = {k: v[0] for k, v in data[i].items()}
            items = d["items"]
            W = copies.get(i, V_received[items].copy())
            Y = duals.get(i, np.zeros_like(W))
            R = np.full((len(d["user_index"]), len(items)), np.nan)
            R[d["user"], d["item"]] = d["rating"]
            # (a) each user's exact ridge solve (the fixed point of the N steps (66)) against W as the paper
            # writes (user_items "copy"), or against the V received ("consensus", the default)
            A = W if alg.user_items == "copy" else V_received[items]
            P = np.zeros((R.shape[0], W.shape[1]))
            for t in range(R.shape[0]):
                rated = ~np.isnan(R[t])
                X = A[rated].copy()
                X[:, -1] = 1.0
                target = R[t, rated] - A[rated, -1]
                P[t] = np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ target)
            # (b) N linearised steps (67) per item column, then (c) with the V received. The column's Lipschitz
            # constant is bounded as the product states: min(sum of |[u_t, 1]|^2 over its raters, lambda_max of
            # the client's whole [U, 1] Gram); both bound lambda_max of the column's own Gram
            E = P.copy()
            E[:, -1] = 1.0
            whole = np.linalg.eigvalsh(E.T @ E)[-1]
            for j in range(len(items)):
                raters = ~np.isnan(R[:, j])
                X = E[raters]
                L = min((X**2).sum(), whole)
                for _ in range(steps):
                    residual = X @ W[j] + P[raters, -1] - R[raters, j]
                    grad = X.T @ residual
                    W[j] = (L * W[j] + rho * V_received[items[j]] - grad - Y[j]) / (L + rho)
                Y[j] = Y[j] + rho * (W[j] - V_received[items[j]])
            copies[i], duals[i] = W, Y
        # eq. (68) over every client that has answered, with its last copy and dual
        S, n = np.zeros_like(V), np.zeros(len(V))
        for i in copies:
            items = data[i]["items"][0]
            S[items] += rho * copies[i] + duals[i]
            n[items] += 1
        held = n > 0
        V[held] = S[held] / (n[held, None] * rho + gamma)
    return V
