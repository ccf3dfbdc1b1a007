"""Recommendations: top-N for a known user on its client, fold-in of a new user at the server."""

import time

import numpy as np
import pytest

from models.recsys.data import client_data, split_users
from models.recsys.recommend import ItemModel, fold_in, fold_in_row, recommend_top_n, top_n


@pytest.fixture
def model(rng):
    Q = rng.normal(size=(40, 4)) * 0.5
    return ItemModel(np.arange(100, 140), Q, mean=3.5, rating_min=0.5, rating_max=5.0, lam=1.0)


def test_fold_in_excludes_rated_items_and_ranks_by_predicted_score(model):
    items, ratings = [101, 107, 130], [5.0, 1.0, 4.5]
    rec = fold_in(model, items, ratings, n=40)
    assert not set(rec.item_ids) & set(items) and len(rec.item_ids) == 37
    row = fold_in_row(model, model.index_of(items), np.array(ratings))
    score = model.mean + model.item_factors[:, :-1] @ row[:-1] + row[-1] + model.item_factors[:, -1]
    unrated = [i for i in range(40) if 100 + i not in items]
    expected = sorted(unrated, key=lambda i: -score[i])
    assert [int(i) - 100 for i in rec.item_ids] == expected
    assert np.all(np.diff(np.clip(score[expected], 0.5, 5)) <= 0)
    np.testing.assert_allclose(rec.scores, np.clip(score[expected], 0.5, 5.0))
    assert len(fold_in(model, items, ratings, n=5).item_ids) == 5


def test_fold_in_row_solves_the_ridge_regression(model):
    idx, r = np.array([1, 4, 9, 20, 33]), np.array([4.0, 2.0, 5.0, 3.0, 1.5])
    row = fold_in_row(model, idx, r)
    Q = model.item_factors[idx]
    D = np.column_stack([Q[:, :-1], np.ones(len(idx))])
    direct = np.linalg.solve(D.T @ D + model.lam * np.eye(4), D.T @ (r - model.mean - Q[:, -1]))
    np.testing.assert_allclose(row, direct)


@pytest.mark.parametrize("items, ratings, message", [
    ([99], [3.0], "unknown item id 99"),
    (["x"], [3.0], "unknown item id 'x'"),
    ([101, 101], [3.0, 4.0], "twice"),
    ([101], [5.5], "outside the range"),
    ([], [], "at least one"),
    ([101, 102], [3.0], "as many ratings"),
])
def test_fold_in_rejects_bad_requests(model, items, ratings, message):
    with pytest.raises(ValueError, match=message):
        fold_in(model, items, ratings)


@pytest.mark.alone  # a wall-clock bound
def test_fold_in_is_fast_on_a_movielens_sized_catalogue(rng):
    big = ItemModel(np.arange(10_000), rng.normal(size=(10_000, 51)) * 0.1, 3.5)
    items = rng.choice(10_000, 10, replace=False)
    fold_in(big, items, np.full(10, 4.0))
    t0 = time.perf_counter()
    rec = fold_in(big, items, np.full(10, 4.0), n=20)
    assert time.perf_counter() - t0 < 0.1 and len(rec.item_ids) == 20


def test_known_user_is_served_by_its_client_without_its_rated_items(rng):
    from models.recsys.synthetic import generate_ratings

    r = generate_ratings(n_users=30, n_items=50, mean_ratings=12, seed=2)
    parts = split_users(r.n_users, 3, "random", np.random.default_rng(0))
    data = client_data(r, parts, 3.5)
    model = ItemModel(r.item_ids, rng.normal(size=(50, 3)), 3.5)
    c, user = 1, int(parts[1][2])
    state = {"user_factors": rng.normal(size=(1, len(parts[1]), 3))}
    rec = recommend_top_n(model, state, data[c], user, n=50)
    rated = set(r.item[r.user == user].tolist())
    assert not set(rec.item_ids.tolist()) & rated and len(rec.item_ids) == 50 - len(rated)
    local = int(np.flatnonzero(parts[1] == user)[0])
    same = top_n(model, state["user_factors"][0, local], np.array(sorted(rated)), 50)
    np.testing.assert_array_equal(rec.item_ids, same.item_ids)
    with pytest.raises(ValueError, match="not held by this client"):
        recommend_top_n(model, state, data[c], int(parts[0][0]))
