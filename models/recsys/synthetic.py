"""Built-in synthetic ratings, seeded: what tests and machines without the shared data use.

A rating is mean + user bias + item bias + u.v (rank `rank`) + noise, clipped to the scale and rounded
to its step, like movielens' half stars. Activity is long-tailed on both sides: users' rating counts are
log-normal (a few rate hundreds of items, most a few dozen) and items are picked with Zipf-like
popularity, so some items have many ratings and most have few.

Three shapes are built in: `synthetic` (600 users x 1,000 items, the tests' default), `synthetic-longtail`
(`LONGTAIL`: 6,000 users x 3,000 items, many more users than items, where movielens-small has 16 times more
items than users; a steep Zipf tail of items and light users) and `netflix-synthetic` (the Netflix Prize's
shape, `generate_netflix_like`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.recsys.data import Ratings, distinct_sorted


def generate_ratings(n_users: int = 600, n_items: int = 1000, rank: int = 5, mean_ratings: float = 50.0,
                     min_ratings: int = 10, noise: float = 0.5, seed: int = 0, rating_min: float = 0.5,
                     rating_max: float = 5.0, step: float = 0.5, activity_sigma: float = 0.9,
                     popularity_exponent: float = 0.8, cover_items: bool = False,
                     name: str = "synthetic") -> Ratings:
    """Low-rank ratings with biases, noise and long-tailed activity (see the module docstring).

    A user's number of ratings is min_ratings + a log-normal (mean about mean_ratings - min_ratings,
    log-sd `activity_sigma`), at most n_items; the items it rates are drawn without replacement with
    popularity proportional to 1 / rank^popularity_exponent (ranks shuffled over the items). With
    `cover_items`, every item no user drew gets one rating, by a user drawn by activity, so no item of
    the catalogue is without ratings. The defaults give `synthetic`, unchanged since it was added."""
    if n_users < 2 or n_items < 2 or rank < 1:
        raise ValueError("need at least 2 users, 2 items and rank 1")
    if not 1 <= min_ratings <= n_items:
        raise ValueError("min_ratings must be between 1 and n_items")
    if activity_sigma < 0 or popularity_exponent < 0:
        raise ValueError("activity_sigma and popularity_exponent must be non-negative")
    rng = np.random.default_rng(seed)
    U = rng.normal(0, 1 / np.sqrt(rank), (n_users, rank)) * 0.9
    V = rng.normal(0, 1 / np.sqrt(rank), (n_items, rank)) * 0.9
    user_bias = rng.normal(0, 0.35, n_users)
    item_bias = rng.normal(0, 0.45, n_items)
    centre = rating_min + 2 * (rating_max - rating_min) / 3
    sigma = activity_sigma
    counts = np.exp(rng.normal(np.log(max(mean_ratings - min_ratings, 1)) - sigma**2 / 2, sigma, n_users))
    counts = np.clip(np.rint(counts) + min_ratings, min_ratings, n_items).astype(int)
    popularity = 1.0 / np.arange(1, n_items + 1) ** popularity_exponent
    popularity = popularity[rng.permutation(n_items)]
    popularity /= popularity.sum()
    user_parts, item_parts = [], []
    for t, c in enumerate(counts):
        user_parts.append(np.full(c, t))
        item_parts.append(rng.choice(n_items, size=c, replace=False, p=popularity))
    users, items = np.concatenate(user_parts), np.concatenate(item_parts)
    if cover_items:
        unrated = np.flatnonzero(np.bincount(items, minlength=n_items) == 0)
        raters = rng.choice(n_users, size=len(unrated), p=counts / counts.sum())
        users, items = np.concatenate([users, raters]), np.concatenate([items, unrated])
        order = np.lexsort((items, users))
        users, items = users[order], items[order]
    value = (centre + user_bias[users] + item_bias[items] + np.einsum("ij,ij->i", U[users], V[items])
             + rng.normal(0, noise, len(users)))
    value = np.clip(np.round(value / step) * step, rating_min, rating_max)
    return Ratings(users.astype(np.int64), items.astype(np.int64), value, np.arange(n_users), np.arange(n_items),
                   float(rating_min), float(rating_max), name)


#: `synthetic-longtail`: ten times more users than movielens-small and a third of its items (2 users per item,
#: against its 0.06), most users light (at least 5 ratings, median 16, a few over 500), and items drawn with
#: Zipf exponent 1.5: a handful rated by most users, median 8 ratings, 36 % of the items 5 or fewer
LONGTAIL: dict[str, Any] = {
    "n_users": 6000, "n_items": 3000, "rank": 5, "mean_ratings": 30.0, "min_ratings": 5, "noise": 0.6,
    "activity_sigma": 1.3, "popularity_exponent": 1.5, "cover_items": True, "name": "synthetic-longtail"}


def generate_longtail(seed: int = 0, rating_min: float = 0.5, rating_max: float = 5.0) -> Ratings:
    """The `synthetic-longtail` data set (`LONGTAIL`), half-star ratings by default."""
    return generate_ratings(seed=seed, rating_min=rating_min, rating_max=rating_max, **LONGTAIL)


#: the Netflix Prize training set's shape: users, movies, ratings (1 to 5 stars)
NETFLIX_SHAPE = (480_189, 17_770, 100_480_507)
_CHUNK = 1 << 22  # pairs drawn, or ratings valued, at a time (fixed: the output depends on it)


def generate_netflix_like(n_users: int = NETFLIX_SHAPE[0], n_items: int = NETFLIX_SHAPE[1],
                          n_ratings: int = NETFLIX_SHAPE[2], rank: int = 10, noise: float = 0.85,
                          user_sigma: float = 1.25, item_sigma: float = 2.0, seed: int = 0,
                          rating_min: float = 1.0, rating_max: float = 5.0, step: float = 1.0) -> Ratings:
    """Netflix-shaped ratings (by default its 480,189 users x 17,770 items, 100,480,507 ratings), with the
    values of `generate_ratings` (low rank + biases + noise, rounded to whole stars), made with numpy in
    a few passes and about 30 bytes a rating at the peak.

    Which pairs are rated: every user rates one item drawn by popularity and every item is rated by one
    user drawn by activity (no empty row or column); the rest are pairs drawn at random with
    probability proportional to activity(user) x popularity(item), both log-normal (sigmas 1.25 and
    2.0: on Netflix a user's count has mean 209 and median 96, an item's mean 5,654 and median 561).
    Repeated pairs are dropped and the shortfall drawn again until exactly `n_ratings` distinct pairs
    remain, so no user rates an item twice, and pairs of heavy users and popular items saturate as on
    Netflix, where the most active users rated nearly every film. Seeded; the result comes sorted by
    (user, item), with user and item indices as int32 and ratings as float64."""
    if n_users < 2 or n_items < 2 or rank < 1:
        raise ValueError("need at least 2 users, 2 items and rank 1")
    if not n_users + n_items <= n_ratings <= n_users * n_items // 2:
        raise ValueError(f"n_ratings must be between users + items ({n_users + n_items}) and half of "
                         f"users x items ({n_users * n_items // 2})")
    rng = np.random.default_rng(seed)
    activity = rng.lognormal(0.0, user_sigma, n_users)
    popularity = rng.lognormal(0.0, item_sigma, n_items)
    user_p = activity / activity.sum()
    user_cdf, item_cdf = np.cumsum(user_p), np.cumsum(popularity / popularity.sum())

    def draw(cdf: np.ndarray, size: int) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(cdf) - 1)

    def pairs(size: int) -> np.ndarray:
        """`size` random (user, item) keys, user * n_items + item, distinct and sorted."""
        users = np.repeat(np.arange(n_users, dtype=np.int64), rng.multinomial(size, user_p))  # sorted
        for s in range(0, size, _CHUNK):
            key = users[s:s + _CHUNK]
            key *= n_items
            key += draw(item_cdf, len(key))
        return distinct_sorted(users)

    cover = np.concatenate([np.arange(n_users, dtype=np.int64) * n_items + draw(item_cdf, n_users),
                            draw(user_cdf, n_items).astype(np.int64) * n_items + np.arange(n_items)])
    keys = distinct_sorted(cover)
    del cover
    while len(keys) < n_ratings:
        need = n_ratings - len(keys)
        new = pairs(need + need // 8 + 1000)  # repeats and pairs already drawn are dropped: draw a few more
        new = new[~_contains(keys, new)]
        if len(new) > need:  # keep a random `need` of them
            new = np.sort(new[rng.permutation(len(new))[:need]])
        keys = np.concatenate([keys, new])
        del new
        keys.sort(kind="stable")  # two sorted runs: a merge
    user = np.empty(n_ratings, dtype=np.int32)
    item = np.empty(n_ratings, dtype=np.int32)
    for s in range(0, n_ratings, _CHUNK):
        user[s:s + _CHUNK], item[s:s + _CHUNK] = np.divmod(keys[s:s + _CHUNK], n_items)
    del keys
    U = rng.normal(0, 1 / np.sqrt(rank), (n_users, rank)) * 0.9
    V = rng.normal(0, 1 / np.sqrt(rank), (n_items, rank)) * 0.9
    user_bias = rng.normal(0, 0.35, n_users)
    item_bias = rng.normal(0, 0.45, n_items)
    centre = rating_min + 2 * (rating_max - rating_min) / 3
    value = np.empty(n_ratings)
    for s in range(0, n_ratings, _CHUNK // 4):  # (chunk, rank) gathers of U and V: 80 MB each at rank 10
        u, i = user[s:s + _CHUNK // 4], item[s:s + _CHUNK // 4]
        v = centre + user_bias[u] + item_bias[i] + np.einsum("ij,ij->i", U[u], V[i])
        v += rng.normal(0, noise, len(u))
        value[s:s + len(u)] = np.clip(np.round(v / step) * step, rating_min, rating_max)
    return Ratings(user, item, value, np.arange(n_users), np.arange(n_items), float(rating_min),
                   float(rating_max), "netflix-synthetic")


def _contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Which of `keys` are in `sorted_keys`."""
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys
