"""Ratings: indexing, the seeded split, clients as groups of users, the synthetic generator, metrics."""

import numpy as np
import pytest

from models.recsys.data import (
    client_data,
    distinct_sorted,
    first_duplicate,
    from_triples,
    index_id_chunks,
    index_ids,
    split_users,
    stack,
    train_test_split,
    unstack,
)
from models.recsys.factors import predict_pairs
from models.recsys.metrics import mae, predict, rmse
from models.recsys.simulator import Evaluator, prepare_clients
from models.recsys.synthetic import LONGTAIL, generate_longtail, generate_netflix_like, generate_ratings


def test_from_triples_indexes_ids_and_rejects_duplicates_and_out_of_range():
    r = from_triples([10, 10, 7], ["a", "b", "a"], [4.0, 3.5, 1.0])
    assert list(r.user_ids) == [7, 10] and list(r.item_ids) == ["a", "b"]
    assert list(r.user) == [1, 1, 0] and list(r.item) == [0, 1, 0]
    with pytest.raises(ValueError, match="twice"):
        from_triples([1, 2, 1], [5, 5, 5], [3, 3, 4])
    with pytest.raises(ValueError, match=r"rating 6 on row 2 is outside the declared range 0.5..5"):
        from_triples([1, 2], [5, 5], [3, 6])
    with pytest.raises(ValueError, match="line 9"):
        from_triples([1, 2], [5, 5], [3, 0], label="line", numbers=np.array([8, 9]))


def test_split_is_seeded_disjoint_and_complete():
    r = generate_ratings(n_users=50, n_items=80, mean_ratings=15, seed=1)
    a_train, a_test = train_test_split(r, 0.2, seed=4)
    _b_train, b_test = train_test_split(r, 0.2, seed=4)
    np.testing.assert_array_equal(a_test.rating, b_test.rating)
    keys = lambda x: set(zip(x.user.tolist(), x.item.tolist()))  # noqa: E731
    assert not keys(a_train) & keys(a_test)
    assert keys(a_train) | keys(a_test) == keys(r)
    assert abs(len(a_test) - 0.2 * len(r)) <= 1
    c_train, _ = train_test_split(r, 0.2, seed=5)
    assert keys(c_train) != keys(a_train)


def test_clients_are_disjoint_groups_of_users():
    for how in ("random", "activity"):
        activity = np.arange(30)[::-1].astype(float)
        parts = split_users(30, 7, how, np.random.default_rng(0), activity)
        assert sorted(np.concatenate(parts).tolist()) == list(range(30))
        assert min(len(p) for p in parts) >= 4
    parts = split_users(30, 3, "activity", np.random.default_rng(0), activity)
    assert activity[parts[0]].max() < activity[parts[2]].min()  # least active first
    with pytest.raises(ValueError, match="only 30 users"):
        split_users(30, 31)
    with pytest.raises(ValueError, match="unknown client split"):
        split_users(30, 3, "zipcode")


def test_stack_pads_and_unstack_restores():
    a = {"x": np.ones((1, 2)), "m": np.ones((1, 2), dtype=bool)}
    b = {"x": np.full((1, 4), 2.0), "m": np.ones((1, 4), dtype=bool)}
    s = stack([a, b])
    assert s["x"].shape == (2, 4) and s["m"].sum() == 6 and s["x"][0, 2:].sum() == 0
    back = unstack(s, [a, b])
    np.testing.assert_array_equal(back[0]["x"], a["x"])
    np.testing.assert_array_equal(back[1]["x"], b["x"])


def test_synthetic_ratings_are_seeded_on_the_scale_and_long_tailed():
    r = generate_ratings(seed=7)
    again = generate_ratings(seed=7)
    np.testing.assert_array_equal(r.rating, again.rating)
    assert r.rating.min() >= 0.5 and r.rating.max() <= 5.0
    np.testing.assert_array_equal(r.rating * 2, np.round(r.rating * 2))  # half stars
    per_user = np.bincount(r.user)
    per_item = np.bincount(r.item, minlength=r.n_items)
    assert per_user.min() >= 10 and per_user.max() > 4 * np.median(per_user)
    assert per_item.max() > 8 * np.median(per_item)
    assert 3.0 < r.rating.mean() < 4.0
    assert not np.array_equal(generate_ratings(seed=8).rating[:100], r.rating[:100])


def test_metrics_are_on_the_original_scale_and_predictions_clipped():
    P = np.array([[1.0, 0.5]])
    Q = np.array([[3.0, 0.0], [-10.0, 0.0]])
    p = predict(3.5, P, Q, np.array([0, 0]), np.array([0, 1]), 0.5, 5.0)
    np.testing.assert_allclose(p, [5.0, 0.5])  # 3.5 + 3 + 0.5 -> 5 (clipped), 3.5 - 10 + 0.5 -> 0.5
    assert rmse([1, 2], [1, 4]) == pytest.approx(np.sqrt(2))
    assert mae([1, 2], [1, 4]) == pytest.approx(1.0)


def test_ids_are_indexed_as_np_unique_does_with_int32_positions():
    rng = np.random.default_rng(0)
    for values in (rng.integers(-50, 50, 1000), rng.integers(0, 10**15, 1000), np.array(["b", "a", "c", "a"]),
                   rng.integers(0, 2**31 - 1, 1000).astype(np.int32)):
        ids, index = index_ids(values)
        want_ids, want_index = np.unique(values, return_inverse=True)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(index, want_index)
        assert ids.dtype == want_ids.dtype and index.dtype == np.int32
    chunks = [rng.integers(5, 900, n) for n in (10, 0, 300, 1)]
    ids, index = index_id_chunks(chunks)
    np.testing.assert_array_equal(index, np.unique(np.concatenate(chunks), return_inverse=True)[1])
    values = rng.integers(0, 10**9, 5000)
    np.testing.assert_array_equal(distinct_sorted(values), np.unique(values))


def test_duplicates_are_found_in_unsorted_ratings_at_their_first_two_positions():
    user = np.array([3, 0, 2, 0, 3, 2, 0], dtype=np.int32)
    item = np.array([1, 4, 2, 1, 1, 2, 4], dtype=np.int32)
    assert first_duplicate(user, item, 5) == (1, 6)  # (0, 4) is the smallest pair rated twice
    assert first_duplicate(np.sort(user), np.arange(7), 7) is None
    with pytest.raises(ValueError, match=r"user 30 rated item 1 twice \(rows 1 and 5\)"):
        from_triples([30, 5, 30, 5, 30], [1, 1, 2, 2, 1], [1, 2, 3, 4, 5])


def lexsort_client_data(train, parts, mean):
    """client_data as it was before the single-key sort (the reference)."""
    owner = np.full(train.n_users, -1)
    local = np.zeros(train.n_users, dtype=np.int64)
    for c, users in enumerate(parts):
        owner[users] = c
        local[users] = np.arange(len(users))
    rc = owner[train.user]
    order = np.lexsort((train.item, train.user, rc))
    rc, u, it, r = rc[order], train.user[order], train.item[order], train.rating[order]
    bounds = np.searchsorted(rc, np.arange(len(parts) + 1))
    out = []
    for c, users in enumerate(parts):
        s, e = bounds[c], bounds[c + 1]
        items = np.unique(it[s:e]).astype(np.int64)
        out.append({"user_index": users[None].astype(np.int64), "user_mask": np.ones((1, len(users)), dtype=bool),
                    "items": items[None], "item_mask": np.ones((1, len(items)), dtype=bool),
                    "user": local[u[s:e]][None], "item": np.searchsorted(items, it[s:e])[None],
                    "rating": (r[s:e] - mean)[None], "mask": np.ones((1, e - s), dtype=bool)})
    return out


def test_client_data_equals_the_lexsort_reference():
    r = generate_ratings(n_users=80, n_items=120, mean_ratings=20, seed=2)
    shuffled = r.subset(np.random.default_rng(1).permutation(len(r)))  # ratings in no particular order
    parts = split_users(r.n_users, 7, "random", np.random.default_rng(3))
    parts = [p[::-1] for p in parts[:-1]]  # users listed in decreasing order; the last group's in no client
    got, want = client_data(shuffled, parts, 3.25), lexsort_client_data(shuffled, parts, 3.25)
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in g:
            np.testing.assert_array_equal(g[k], w[k])
            assert g[k].dtype == w[k].dtype, k


def test_chunked_evaluation_equals_the_whole_at_once_exactly():
    r = generate_ratings(n_users=60, n_items=90, mean_ratings=20, seed=5)
    train, test = train_test_split(r, 0.2, seed=0)
    clients = prepare_clients(train, split_users(train.n_users, 6, "random", np.random.default_rng(0)))
    rng = np.random.default_rng(1)
    P, Q = rng.normal(0, 0.5, (r.n_users, 4)), rng.normal(0, 0.5, (r.n_items, 4))
    whole = Evaluator(clients, test, chunk=10**9)(P, Q, 2.5)
    for chunk in (1, 7, 100, len(test) - 1):
        assert Evaluator(clients, test, chunk=chunk)(P, Q, 2.5) == whole  # exactly, not approximately
    # and as evaluated before chunking: every rating's prediction at once
    pred = np.clip(clients.mean + predict_pairs(P[test.user], Q[test.item]), test.rating_min, test.rating_max)
    resid = predict_pairs(P[train.user], Q[train.item]) - (train.rating - clients.mean)
    assert whole == {"test_rmse": rmse(pred, test.rating), "test_mae": mae(pred, test.rating),
                     "train_rmse": float(np.sqrt(np.mean(resid**2))),
                     "objective": float((0.5 * resid @ resid + 2.5) / len(resid))}


def test_netflix_shaped_ratings_have_the_declared_shape_skew_and_no_repeats():
    r = generate_netflix_like(n_users=3000, n_items=800, n_ratings=120_000, seed=4)
    assert (len(r), r.n_users, r.n_items, r.name) == (120_000, 3000, 800, "netflix-synthetic")
    assert r.user.dtype == r.item.dtype == np.int32
    key = r.user.astype(np.int64) * r.n_items + r.item
    assert np.all(np.diff(key) > 0)  # sorted by (user, item) and no pair twice
    per_user = np.bincount(r.user, minlength=r.n_users)
    per_item = np.bincount(r.item, minlength=r.n_items)
    assert per_user.min() >= 1 and per_item.min() >= 1  # no empty row or column
    assert per_user.mean() > 1.4 * np.median(per_user) and per_user.max() > 8 * np.median(per_user)
    assert per_item.mean() > 3 * np.median(per_item) and per_item.max() > 40 * np.median(per_item)
    assert set(np.unique(r.rating)) <= {1.0, 2.0, 3.0, 4.0, 5.0} and 3.2 < r.rating.mean() < 4.0
    again = generate_netflix_like(n_users=3000, n_items=800, n_ratings=120_000, seed=4)
    np.testing.assert_array_equal(key, again.user.astype(np.int64) * 800 + again.item)
    np.testing.assert_array_equal(r.rating, again.rating)
    other = generate_netflix_like(n_users=3000, n_items=800, n_ratings=120_000, seed=5)
    assert not np.array_equal(other.item[:1000], r.item[:1000])
    with pytest.raises(ValueError, match="n_ratings must be between"):
        generate_netflix_like(n_users=10, n_items=10, n_ratings=60)


def test_longtail_ratings_have_the_stated_shape():
    """synthetic-longtail as models/recsys/synthetic.py and docs/recommendation.md state it: 6,000 users x 3,000
    items (ten users per item where movielens-small has 16 items per user), 180,200 half-star ratings, every item
    rated, light users (at least 5, median 16) with a few heavy ones, and a steep tail of items."""
    r = generate_longtail()
    assert (len(r), r.n_users, r.n_items, r.name) == (180_200, 6000, 3000, "synthetic-longtail")
    key = r.user.astype(np.int64) * r.n_items + r.item
    assert len(np.unique(key)) == len(r)  # no pair twice
    np.testing.assert_array_equal(r.rating * 2, np.round(r.rating * 2))
    assert r.rating.min() == 0.5 and r.rating.max() == 5.0 and 3.3 < r.rating.mean() < 3.7
    per_user = np.bincount(r.user, minlength=r.n_users)
    per_item = np.bincount(r.item, minlength=r.n_items)
    assert per_user.min() == 5 and np.median(per_user) == 16 and per_user.max() > 500
    assert per_item.min() >= 1  # cover_items: no item without ratings
    assert 0.3 < np.mean(per_item <= 5) < 0.4 and np.median(per_item) == 8
    assert per_item.max() > r.n_users / 2  # a handful of items rated by most users
    again = generate_longtail()
    np.testing.assert_array_equal(key, again.user.astype(np.int64) * r.n_items + again.item)
    np.testing.assert_array_equal(r.rating, again.rating)
    assert not np.array_equal(generate_longtail(seed=1).item[:1000], r.item[:1000])
    assert generate_ratings(**{**LONGTAIL, "n_users": 50, "n_items": 40, "min_ratings": 2}).n_items == 40


def test_a_million_ratings_take_at_most_17_bytes_each():
    """The issue's bound is 50 bytes a rating; int32 indices and float64 ratings make 16."""
    r = generate_netflix_like(n_users=4800, n_items=17770, n_ratings=1_000_000, seed=0)
    train, test = train_test_split(r, 0.2, seed=0)
    for x in (r, train, test):
        held = sum(a.nbytes for a in (x.user, x.item, x.rating, x.user_ids, x.item_ids))
        assert held / len(x) <= 17, held / len(x)
