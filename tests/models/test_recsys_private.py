"""Private mode for federated recommendation (models.recsys.private): the server step fed the secure sum of a
round's uploads (SecAgg+ in process) learns what it learns from the plaintext uploads, to fixed-point error; a
third of a round dropping after upload changes nothing; values beyond the announced bound are clipped, not
wrapped; what cannot be private is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from models.recsys import FEDERATED, make_algorithm
from models.recsys.data import split_users, train_test_split
from models.recsys.evaluation import prepare_clients
from models.recsys.private import HELD, VALUE_BOUND, SummedRecsys, as_upload, dense
from models.recsys.simulator import run_federated, simulate_recsys
from models.recsys.synthetic import generate_ratings


@pytest.fixture(scope="module")
def small():
    r = generate_ratings(n_users=120, n_items=150, rank=3, mean_ratings=25, seed=5)
    train, test = train_test_split(r, 0.2, seed=0)
    parts = split_users(train.n_users, 12, "random", np.random.default_rng(0))
    return train, test, parts


def run(small, name, summed=None, rounds=12):
    train, test, parts = small
    alg = make_algorithm(name, train.n_items, 3)
    receive = None if summed is None else SummedRecsys(alg, max(len(p) for p in parts), **summed)
    out = run_federated(alg, prepare_clients(train, parts), test, rounds, 0.34, seed=1, receive=receive)
    return out, receive


@pytest.mark.parametrize("name", list(FEDERATED))
def test_private_equals_plaintext_to_fixed_point_error(small, name):
    plain, _ = run(small, name)
    private, summed = run(small, name, {"seed": 2})
    assert summed.transport.sums == 12 + make_algorithm(name, 150, 3).setup_rounds  # every round a secure sum
    assert abs(private.history[-1]["test_rmse"] - plain.history[-1]["test_rmse"]) < 1e-6
    np.testing.assert_allclose(private.item_factors, plain.item_factors, atol=1e-6)
    np.testing.assert_allclose(private.user_factors, plain.user_factors, atol=1e-6)
    assert summed.transport.secure and summed.transport.clipped == 0 and not summed.transport.failures
    assert not np.array_equal(private.item_factors, plain.item_factors) or name == "fedmavg"  # fixed point: not bits


@pytest.mark.parametrize("name", ["fedmc-admm", "altgdmin"])
def test_a_third_dropping_after_upload_gives_the_same_model(small, name):
    whole, _ = run(small, name, {"seed": 2}, rounds=6)
    dropped, summed = run(small, name, {"seed": 9, "dropout": 1 / 3}, rounds=6)
    assert summed.transport.dropout == pytest.approx(1 / 3) and not summed.transport.failures
    np.testing.assert_array_equal(dropped.item_factors, whole.item_factors)  # the sum is exact: same bits


def test_values_beyond_the_bound_are_clipped_not_wrapped(small):
    train = small[0]
    alg = make_algorithm("fedmavg", train.n_items, 3)
    summed = SummedRecsys(alg, 4, seed=0)
    items = np.array([[0, 1, 2], [1, 2, 0]])
    delta = np.zeros((2, 3, 4))
    delta[0, 0, 0] = 10 * VALUE_BOUND  # an honest device far beyond the announced bound
    delta[1, 1, 1] = -0.25
    total = summed(np.array([3, 7]), {"items": items, "item_mask": np.ones((2, 3), dtype=bool), "delta": delta})
    assert summed.transport.clipped == 1 and summed.largest["delta"] == 10.0  # reported: the device is 10x beyond
    assert total["delta"].shape == (1, train.n_items, 4)
    assert total["delta"][0, 0, 0] == pytest.approx(VALUE_BOUND, abs=1e-6)  # clipped to the bound
    assert total["delta"][0, 2, 1] == pytest.approx(-0.25, abs=1e-6)
    np.testing.assert_array_equal(np.flatnonzero(total["item_mask"][0]), [0, 1, 2])


def test_dense_rows_sum_to_the_sparse_uploads():
    alg = make_algorithm("fedmc-admm", 6, 2)
    uploads = {"items": np.array([[4, 1, 0], [1, 5, 0]]), "item_mask": np.array([[1, 1, 0], [1, 1, 0]], dtype=bool),
               "delta": np.arange(18, dtype=float).reshape(2, 3, 3), "new": np.array([True, False])}
    rows = dense(alg, uploads)
    np.testing.assert_array_equal(rows[HELD], [[0, 1, 0, 0, 1, 0], [0, 1, 0, 0, 0, 1]])
    np.testing.assert_array_equal(rows["new"], [[0, 1, 0, 0, 1, 0], [0] * 6])  # joined on the items it holds
    one = as_upload({k: v.sum(axis=0, keepdims=True) for k, v in rows.items()}, 6)
    np.testing.assert_array_equal(one["delta"][0, 1], uploads["delta"][0, 1] + uploads["delta"][1, 0])
    np.testing.assert_array_equal(np.flatnonzero(one["item_mask"][0]), [1, 4, 5])


def test_what_cannot_be_private_is_refused_by_name(small):
    train, test, parts = small
    with pytest.raises(ValueError, match="private mode: centralized is not federated"):
        simulate_recsys(train, test, parts, "centralized", 3, 2, private=True)
    with pytest.raises(ValueError, match=r"12 clients at fraction 0\.05 sample 1"):
        simulate_recsys(train, test, parts, "fedmavg", 3, 2, 0.05, private=True)
    alg = make_algorithm("fedmavg", train.n_items, 3)
    alg.summed = {}
    with pytest.raises(ValueError, match="fedmavg has no summable uploads"):
        SummedRecsys(alg, 4)


def test_the_json_reports_bytes_per_device_round_both_ways(small):
    train, test, parts = small
    plain = simulate_recsys(train, test, parts, "altgdmin", 3, 3, 0.34, seed=1)
    private = simulate_recsys(train, test, parts, "altgdmin", 3, 3, 0.34, seed=1, private=True)
    assert plain["private"] is False and plain["upload_bytes_per_device_round"] > 0
    assert private["plaintext_upload_bytes_per_device_round"] == plain["upload_bytes_per_device_round"]
    # dense over the catalogue: every item's rank + 3 values, 5 bytes each, and the protocol's keys and shares
    assert private["upload_bytes_per_device_round"] > 5 * 150 * (3 + 3)
    assert sum(private["upload_bytes_by_step"].values()) == pytest.approx(private["upload_bytes_per_device_round"])
