"""The federated recommendation algorithms: server bookkeeping, batching and what they learn."""

import numpy as np
import pytest

from models.core.rounds import run_round
from models.core.sampling import sample_clients
from models.recsys import FEDERATED, make_algorithm
from models.recsys.batch import RatingBatch
from models.recsys.data import client_data, split_users, stack, train_test_split, unstack
from models.recsys.fedmc_admm import FedMCADMM
from models.recsys.simulator import prepare_clients, simulate_recsys
from models.recsys.synthetic import generate_ratings


@pytest.fixture(scope="module")
def small():
    r = generate_ratings(n_users=200, n_items=300, rank=4, mean_ratings=30, seed=3)
    train, test = train_test_split(r, 0.2, seed=0)
    parts = split_users(train.n_users, 20, "random", np.random.default_rng(0))
    return train, test, parts


def drive(alg, clients, rounds, per_round, seed=0):
    """The simulator's loop (the shared round of models.core.rounds), keeping the server state for inspection."""
    rng = np.random.default_rng(seed)
    server, broadcast = alg.init_server(clients.n_clients, rng)
    states = [alg.init_clients(d, broadcast) for d in clients.data]
    for _ in range(alg.setup_rounds):
        server, broadcast = alg.server_setup(server, alg.client_setup(stack(states), stack(clients.data), broadcast))
    for _ in range(rounds):
        idx = sample_clients(rng, clients.n_clients, per_round / clients.n_clients)
        old = [states[i] for i in idx]
        done = run_round(alg, server, broadcast, idx, stack(old), stack([clients.data[i] for i in idx]),
                         clients.weight[idx])
        server, broadcast = done.server, done.broadcast
        for i, s in zip(idx, unstack(done.states, old)):
            states[i] = s
    return server, broadcast, states


@pytest.mark.parametrize("regularizer", ["l2", "l1"])
def test_running_sum_equals_the_full_recomputation(small, regularizer):
    """The server keeps only S = sum_i (rho W_i + Y_i) and counts; they equal what every client holds."""
    train, _, parts = small
    clients = prepare_clients(train, parts)
    alg = FedMCADMM(train.n_items, rank=3, regularizer=regularizer)
    server, broadcast, states = drive(alg, clients, rounds=25, per_round=4)
    S = np.zeros_like(server["item_sum"])
    count = np.zeros(train.n_items)
    for d, s in zip(clients.data, states):
        if s["joined"][0]:
            items = d["items"][0]
            S[items] += alg.rho * s["item_copy"][0] + s["item_dual"][0]
            count[items] += 1
    assert 0 < (count > 0).sum() < train.n_items or (count > 0).all()
    np.testing.assert_allclose(server["item_sum"], S, atol=1e-9)
    np.testing.assert_array_equal(server["item_count"], count)
    seen = count > 0
    np.testing.assert_allclose(broadcast["item_factors"][seen], alg.consensus_rows(S[seen], count[seen]), atol=1e-9)
    assert set(server) == {"item_factors", "item_sum", "item_count"}  # nothing per client at the server


def test_v_update_68_is_the_minimiser_of_16(rng):
    alg = FedMCADMM(10, rank=2, rho=3.0, gamma=0.5)
    W, Y = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))  # four clients' copies of one item row
    V = alg.consensus_rows((alg.rho * W + Y).sum(0, keepdims=True), np.array([4.0]))[0]
    # gradient of sum_i <Y_i, W_i - V> + rho/2 |W_i - V|^2 + gamma/2 |V|^2 at V
    np.testing.assert_allclose(-Y.sum(0) - alg.rho * (W - V).sum(0) + alg.gamma * V, 0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(FEDERATED))
def test_a_batch_gives_the_same_as_each_client_alone(small, name):
    """The simulator batches sampled clients; a device runs a batch of one. Both must agree."""
    train, _, parts = small
    clients = prepare_clients(train, parts)
    alg = make_algorithm(name, train.n_items, 3)
    _server, broadcast, states = drive(alg, clients, rounds=6, per_round=5, seed=1)
    idx = [0, 3, 7]
    together, up = alg.client_update(stack([states[i] for i in idx]), stack([clients.data[i] for i in idx]),
                                     broadcast)
    together = unstack(together, [states[i] for i in idx])
    for pos, i in enumerate(idx):
        alone, up1 = alg.client_update(states[i], clients.data[i], broadcast)
        for k in alone:
            np.testing.assert_allclose(together[pos][k], alone[k], atol=1e-9, err_msg=f"{name} {k}")
        n = int(clients.data[i]["item_mask"].sum())
        for k, v in up1.items():
            if v.ndim >= 2:
                np.testing.assert_allclose(up[k][pos, :n], v[0, :n], atol=1e-9, err_msg=f"{name} upload {k}")


@pytest.mark.parametrize("name", ["fedmc-admm", "fedmavg", "altgdmin", "centralized"])
def test_learns_and_beats_the_global_mean(small, name):
    train, test, parts = small
    r = simulate_recsys(train, test, parts, name, rank=4, rounds=30 if name != "centralized" else 10,
                        fraction=0.25, seed=0)
    h = [e["test_rmse"] for e in r["history"]]
    if name != "centralized":  # ALS is essentially done after its first sweep
        assert h[-1] < h[0] - 0.01
    assert r["test_rmse"] < r["global_mean_test_rmse"] - 0.05
    assert r["history"][-1]["objective"] < r["history"][0]["objective"]
    assert [e["round"] for e in r["history"]] == list(range(1, len(h) + 1))


def test_fedmc_admm_beats_fedmavg_under_the_same_settings(small):
    train, test, parts = small
    a = simulate_recsys(train, test, parts, "fedmc-admm", 4, 30, 0.25, 0)
    b = simulate_recsys(train, test, parts, "fedmavg", 4, 30, 0.25, 0)
    assert a["test_rmse"] < b["test_rmse"]
    assert a["upload_bytes_per_client_round"] > 0


def test_altgdmin_keeps_an_orthonormal_basis_started_at_the_top_singular_vectors(small):
    train, _, parts = small
    clients = prepare_clients(train, parts)
    alg = make_algorithm("altgdmin", train.n_items, 3, power_iterations=60)
    server, _, _ = drive(alg, clients, rounds=0, per_round=5)
    Y = np.zeros((train.n_items, train.n_users))
    Y[train.item, train.user] = train.rating - clients.mean
    top = np.linalg.svd(Y, full_matrices=False)[0][:, :3]
    Z = server["basis"]
    assert np.linalg.norm(Z - top @ (top.T @ Z)) < 1e-3  # same subspace
    server, _, _ = drive(alg, clients, rounds=5, per_round=5)
    np.testing.assert_allclose(server["basis"].T @ server["basis"], np.eye(3), atol=1e-10)


def test_client_data_holds_each_clients_centred_ratings(small):
    train, _, parts = small
    data = client_data(train, parts, 3.0)
    total = 0
    for users, d in zip(parts, data):
        assert set(d["user_index"][0]) == set(users)
        u = d["user_index"][0][d["user"][0]]
        i = d["items"][0][d["item"][0]]
        mine = np.isin(train.user, users)
        got = sorted(zip(u, i, d["rating"][0] + 3.0))
        assert got == sorted(zip(train.user[mine], train.item[mine], train.rating[mine]))
        total += d["mask"].sum()
    assert total == len(train)
    batch = RatingBatch.of(stack(data[:3]))
    assert batch.nnz == sum(d["mask"].sum() for d in data[:3]) and batch.prefix


def test_rejects_bad_hyper_parameters():
    with pytest.raises(ValueError, match="rank"):
        FedMCADMM(10, rank=10)
    with pytest.raises(ValueError, match="rho"):
        FedMCADMM(10, rank=2, rho=0)
    with pytest.raises(ValueError, match="regularizer"):
        FedMCADMM(10, rank=2, regularizer="l3")
    with pytest.raises(ValueError, match="unknown algorithm"):
        make_algorithm("sgd", 10, 2)
