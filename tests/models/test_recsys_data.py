"""Ratings: indexing, the seeded split, clients as groups of users, the synthetic generator, metrics."""

import numpy as np
import pytest

from models.recsys.data import from_triples, split_users, stack, train_test_split, unstack
from models.recsys.metrics import mae, predict, rmse
from models.recsys.synthetic import generate_ratings


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
