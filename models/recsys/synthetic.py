"""Built-in synthetic ratings, seeded: what tests and machines without the shared data use.

A rating is mean + user bias + item bias + u.v (rank `rank`) + noise, clipped to the scale and rounded
to its step, like movielens' half stars. Activity is long-tailed on both sides: users' rating counts are
log-normal (a few rate hundreds of items, most a few dozen) and items are picked with Zipf-like
popularity, so some items have many ratings and most have few.
"""

from __future__ import annotations

import numpy as np

from models.recsys.data import Ratings


def generate_ratings(n_users: int = 600, n_items: int = 1000, rank: int = 5, mean_ratings: float = 50.0,
                     min_ratings: int = 10, noise: float = 0.5, seed: int = 0, rating_min: float = 0.5,
                     rating_max: float = 5.0, step: float = 0.5) -> Ratings:
    """Low-rank ratings with biases, noise and long-tailed activity (see the module docstring)."""
    if n_users < 2 or n_items < 2 or rank < 1:
        raise ValueError("need at least 2 users, 2 items and rank 1")
    if not 1 <= min_ratings <= n_items:
        raise ValueError("min_ratings must be between 1 and n_items")
    rng = np.random.default_rng(seed)
    U = rng.normal(0, 1 / np.sqrt(rank), (n_users, rank)) * 0.9
    V = rng.normal(0, 1 / np.sqrt(rank), (n_items, rank)) * 0.9
    user_bias = rng.normal(0, 0.35, n_users)
    item_bias = rng.normal(0, 0.45, n_items)
    centre = rating_min + 2 * (rating_max - rating_min) / 3
    sigma = 0.9
    counts = np.exp(rng.normal(np.log(max(mean_ratings - min_ratings, 1)) - sigma**2 / 2, sigma, n_users))
    counts = np.clip(np.rint(counts) + min_ratings, min_ratings, n_items).astype(int)
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.8
    popularity = popularity[rng.permutation(n_items)]
    popularity /= popularity.sum()
    users, items = [], []
    for t, c in enumerate(counts):
        users.append(np.full(c, t))
        items.append(rng.choice(n_items, size=c, replace=False, p=popularity))
    users, items = np.concatenate(users), np.concatenate(items)
    value = (centre + user_bias[users] + item_bias[items] + np.einsum("ij,ij->i", U[users], V[items])
             + rng.normal(0, noise, len(users)))
    value = np.clip(np.round(value / step) * step, rating_min, rating_max)
    return Ratings(users.astype(np.int64), items.astype(np.int64), value, np.arange(n_users), np.arange(n_items),
                   float(rating_min), float(rating_max), "synthetic")
