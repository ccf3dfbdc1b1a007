"""Ratings as parallel arrays, the seeded train/test split, clients as disjoint groups of users, and the
batched per-client arrays the algorithms work on. Pure functions: no file I/O here."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from models.federated import State

CLIENT_SPLITS = ("random", "activity")


@dataclass(frozen=True)
class Ratings:
    """Explicit ratings. ``user`` and ``item`` are dense indices into ``user_ids`` / ``item_ids`` (the
    original ids), shared by the train and test parts of one data set."""

    user: np.ndarray  # (n,) int64
    item: np.ndarray  # (n,) int64
    rating: np.ndarray  # (n,) float64, on the original scale
    user_ids: np.ndarray  # (n_users,) original user ids
    item_ids: np.ndarray  # (n_items,) original item ids
    rating_min: float = 0.5
    rating_max: float = 5.0
    name: str = "ratings"

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    def __len__(self) -> int:
        return len(self.rating)

    def subset(self, idx: np.ndarray) -> Ratings:
        """The ratings at positions idx (same id lists, so indices stay comparable)."""
        return replace(self, user=self.user[idx], item=self.item[idx], rating=self.rating[idx])


def from_triples(users: np.ndarray, items: np.ndarray, ratings: np.ndarray, rating_min: float = 0.5,
                 rating_max: float = 5.0, name: str = "ratings") -> Ratings:
    """Index raw (user id, item id, rating) triples. Raises ValueError on duplicates or out-of-range ratings."""
    users, items = np.asarray(users), np.asarray(items)
    ratings = np.asarray(ratings, dtype=float)
    if not len(users) == len(items) == len(ratings):
        raise ValueError("users, items and ratings must have the same length")
    if len(ratings) == 0:
        raise ValueError("no ratings")
    if not np.isfinite(ratings).all():
        raise ValueError("ratings must be finite numbers")
    bad = np.flatnonzero((ratings < rating_min) | (ratings > rating_max))
    if len(bad):
        raise ValueError(f"rating {ratings[bad[0]]:g} (row {bad[0] + 1}) is outside the declared range "
                         f"{rating_min:g}..{rating_max:g}")
    user_ids, user = np.unique(users, return_inverse=True)
    item_ids, item = np.unique(items, return_inverse=True)
    key = user.astype(np.int64) * len(item_ids) + item
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(np.diff(key[order]) == 0)
    if len(dup):
        a, b = sorted(order[dup[0]:dup[0] + 2])
        raise ValueError(f"user {users[a]} rated item {items[a]} twice (rows {a + 1} and {b + 1})")
    return Ratings(user.astype(np.int64), item.astype(np.int64), ratings, user_ids, item_ids,
                   float(rating_min), float(rating_max), name)


def train_test_split(ratings: Ratings, test_share: float = 0.2, seed: int = 0) -> tuple[Ratings, Ratings]:
    """Seeded random split of the ratings (not of the users): every user keeps most of their ratings in
    training, as in the paper and the references of shared/data/README.md."""
    if not 0 < test_share < 1:
        raise ValueError("test_share must be in (0, 1)")
    perm = np.random.default_rng(seed).permutation(len(ratings))
    n_test = int(round(test_share * len(perm)))
    return ratings.subset(np.sort(perm[n_test:])), ratings.subset(np.sort(perm[:n_test]))


def split_users(n_users: int, n_clients: int, how: str = "random", rng: np.random.Generator | None = None,
                activity: np.ndarray | None = None) -> list[np.ndarray]:
    """Disjoint groups of users, one per client, every client holding at least one user.

    random: a seeded shuffle cut into near-equal groups. activity: users sorted by their number of
    training ratings and cut into contiguous groups, so clients range from the least to the most active
    users (equal user counts, very unequal rating counts: the non-i.i.d. case)."""
    rng = rng or np.random.default_rng(0)
    if n_clients < 1:
        raise ValueError("clients must be at least 1")
    if n_clients > n_users:
        raise ValueError(f"{n_clients} clients but only {n_users} users: every client needs a user")
    if how == "random":
        order = rng.permutation(n_users)
    elif how == "activity":
        counts = np.zeros(n_users) if activity is None else np.asarray(activity, dtype=float)
        order = np.lexsort((rng.random(n_users), counts))
    else:
        raise ValueError(f"unknown client split {how!r}; choose from {', '.join(CLIENT_SPLITS)}")
    return [np.sort(p) for p in np.array_split(order, n_clients)]


def global_mean(counts: np.ndarray, sums: np.ndarray) -> float:
    """The pooled mean rating from each client's (count, sum): the one statistic every algorithm shares."""
    n = float(np.sum(counts))
    return float(np.sum(sums) / n) if n > 0 else 0.0


def client_arrays(train: Ratings, parts: list[np.ndarray], mean: float) -> State:
    """The clients' training data as batched, padded arrays (leading axis = client).

    Per client: its users (``user_index``, global user indices, padded, ``user_mask``), the items it holds
    training ratings for (``items``, global item indices, padded, ``item_mask``), and its ratings sorted by
    (user, item) as local positions ``user`` / ``item`` with ``rating`` centred on the global mean and
    ``mask``. A device holds the same arrays with a batch of one."""
    owner = np.full(train.n_users, -1)
    local = np.zeros(train.n_users, dtype=np.int64)
    for c, users in enumerate(parts):
        owner[users] = c
        local[users] = np.arange(len(users))
    rc = owner[train.user]
    order = np.lexsort((train.item, train.user, rc))
    rc, u, it, r = rc[order], train.user[order], train.item[order], train.rating[order]
    bounds = np.searchsorted(rc, np.arange(len(parts) + 1))
    n = len(parts)
    M = max(1, max(len(p) for p in parts))
    per_items = [np.unique(it[bounds[c]:bounds[c + 1]]) for c in range(n)]
    J = max(1, max(len(x) for x in per_items))
    R = max(1, int(np.max(np.diff(bounds))) if n else 1)
    out = {
        "user_index": np.zeros((n, M), dtype=np.int64), "user_mask": np.zeros((n, M), dtype=bool),
        "items": np.zeros((n, J), dtype=np.int64), "item_mask": np.zeros((n, J), dtype=bool),
        "user": np.zeros((n, R), dtype=np.int64), "item": np.zeros((n, R), dtype=np.int64),
        "rating": np.zeros((n, R)), "mask": np.zeros((n, R), dtype=bool),
    }
    for c, users in enumerate(parts):
        out["user_index"][c, :len(users)] = users
        out["user_mask"][c, :len(users)] = True
        items = per_items[c]
        out["items"][c, :len(items)] = items
        out["item_mask"][c, :len(items)] = True
        s, e = bounds[c], bounds[c + 1]
        out["user"][c, :e - s] = local[u[s:e]]
        out["item"][c, :e - s] = np.searchsorted(items, it[s:e])
        out["rating"][c, :e - s] = r[s:e] - mean
        out["mask"][c, :e - s] = True
    return out
