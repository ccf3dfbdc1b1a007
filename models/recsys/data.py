"""Ratings as parallel arrays, the seeded train/test split, clients as disjoint groups of users, and the
batched per-client arrays the algorithms work on. Pure functions: no file I/O here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from models.core.federated import State


class LineNumbers(Protocol):
    """The line (of the file read) of each rating row an error names."""

    def __getitem__(self, k: int) -> int: ...

CLIENT_SPLITS = ("random", "activity")


@dataclass(frozen=True)
class Ratings:
    """Explicit ratings. ``user`` and ``item`` are dense indices into ``user_ids`` / ``item_ids`` (the
    original ids), shared by the train and test parts of one data set."""

    user: np.ndarray  # (n,) int32 (int64 past 2**31 users), index into user_ids
    item: np.ndarray  # (n,) int32 (int64 past 2**31 items), index into item_ids
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
                 rating_max: float = 5.0, name: str = "ratings", label: str = "row",
                 numbers: LineNumbers | None = None) -> Ratings:
    """Index raw (user id, item id, rating) triples. ValueError on duplicates or out-of-range ratings,
    naming the entry as f"{label} {numbers[position]}" (default numbers: 1, 2, ...; a file reader passes
    "line" and the line numbers: any sequence, read only for the entry named)."""
    users, items = np.asarray(users), np.asarray(items)
    ratings = np.asarray(ratings, dtype=float)
    if not len(users) == len(items) == len(ratings):
        raise ValueError("users, items and ratings must have the same length")
    if len(ratings) == 0:
        raise ValueError("no ratings")
    user_ids, user = index_ids(users)
    item_ids, item = index_ids(items)
    return from_indexed(user, item, ratings, user_ids, item_ids, rating_min, rating_max, name, label, numbers)


def check_ratings(ratings: np.ndarray, rating_min: float, rating_max: float, label: str = "row",
                  numbers: LineNumbers | None = None) -> None:
    """ValueError unless every rating is a finite number in rating_min..rating_max."""
    if not np.isfinite(ratings).all():
        raise ValueError("ratings must be finite numbers")
    bad = np.flatnonzero((ratings < rating_min) | (ratings > rating_max))
    if len(bad):
        raise ValueError(f"rating {ratings[bad[0]]:g} on {label} {_number(numbers, bad[0])} is outside the "
                         f"declared range {rating_min:g}..{rating_max:g}")


def from_indexed(user: np.ndarray, item: np.ndarray, ratings: np.ndarray, user_ids: np.ndarray,
                 item_ids: np.ndarray, rating_min: float = 0.5, rating_max: float = 5.0, name: str = "ratings",
                 label: str = "row", numbers: LineNumbers | None = None) -> Ratings:
    """`from_triples` for ids already indexed (``user_ids[user]`` are the raters' ids): checks the
    ratings and that no (user, item) pair comes twice, and keeps the arrays as given."""
    check_ratings(ratings, rating_min, rating_max, label, numbers)
    twice = first_duplicate(user, item, len(item_ids))
    if twice is not None:
        a, b = twice
        raise ValueError(f"user {user_ids[user[a]]} rated item {item_ids[item[a]]} twice ({label}s "
                         f"{_number(numbers, a)} and {_number(numbers, b)})")
    return Ratings(user, item, ratings, user_ids, item_ids, float(rating_min), float(rating_max), name)


def _number(numbers: LineNumbers | None, k: int) -> int:
    return k + 1 if numbers is None else int(numbers[k])


def index_dtype(n: int) -> type:
    """int32 for indices into fewer than 2**31 things (4 bytes a rating instead of 8), int64 otherwise."""
    return np.int32 if n < 2**31 else np.int64


def index_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ids, each value's position among them), as ``np.unique(return_inverse=True)``
    gives, with compact positions (`index_dtype`). See `index_id_chunks`."""
    return index_id_chunks([np.asarray(values)])


def index_id_chunks(chunks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`index_ids` of the concatenation of `chunks` (views of a file reader's column blocks, say), without
    concatenating them. Whole-number ids spanning a range no wider than a few times their count go
    through a presence table (linear time, no sort); others through np.unique."""
    n = sum(len(c) for c in chunks)
    kind = chunks[0].dtype.kind if chunks else "f"
    if kind in "iu" and n:
        lo = min(int(c.min()) for c in chunks if len(c))
        hi = max(int(c.max()) for c in chunks if len(c))
        if hi - lo < max(4 * n, 1 << 20):
            present = np.zeros(hi - lo + 1, dtype=bool)
            for c in chunks:
                present[c - lo if lo else c] = True
            ids = (np.flatnonzero(present) + lo).astype(chunks[0].dtype)
            position: np.ndarray = (np.cumsum(present, dtype=np.int64) - 1).astype(index_dtype(len(ids)))
            out = np.empty(n, dtype=position.dtype)
            start = 0
            for c in chunks:
                out[start:start + len(c)] = position[c - lo if lo else c]
                start += len(c)
            return ids, out
    values = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    ids, inverse = np.unique(values, return_inverse=True)
    return ids, inverse.reshape(-1).astype(index_dtype(len(ids)))


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` by a sort: numpy 2.3+ unique hashes, which is 10 to 60 times slower on
    millions of mostly distinct integers."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def first_duplicate(user: np.ndarray, item: np.ndarray, n_items: int) -> tuple[int, int] | None:
    """The positions (a < b) of the first two ratings of the smallest repeated (user, item) pair, or None.

    One int64 key per rating; no sort at all when the ratings come sorted by (user, item), as files
    usually do, and an in-place sort of the keys (no argsort) otherwise."""
    key = user.astype(np.int64) * n_items + item
    if len(key) < 2 or bool(np.all(key[1:] > key[:-1])):
        return None
    ordered = np.sort(key)
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    if not len(same):
        return None
    a, b = np.flatnonzero(key == ordered[same[0]])[:2]
    return int(a), int(b)


def count_distinct(index: np.ndarray, n: int) -> int:
    """How many of 0..n-1 occur in `index` (``len(np.unique(index))`` without sorting)."""
    return int(np.count_nonzero(np.bincount(index, minlength=n)))


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


def client_data(train: Ratings, parts: list[np.ndarray], mean: float) -> list[State]:
    """Each client's training data as a batch of one (what a device holds), unpadded.

    Arrays: its users (``user_index``, global user indices, with ``user_mask``), the items it holds
    training ratings for (``items``, global item indices, with ``item_mask``), and its ratings sorted by
    (user, item) as local positions ``user`` / ``item`` with ``rating`` centred on the global mean and
    ``mask``. `stack` pads and batches several clients (masks are False in the padding).

    The ratings are grouped by client with a stable sort of one small integer per rating (a radix sort:
    linear time), then each client's are sorted by one int64 key (its user's place among the client's
    sorted users, then the item): the order of a lexicographic sort by (client, user, item), without
    its copies of every column or an argsort of all the ratings."""
    n_parts = len(parts)
    owner_type = np.int16 if n_parts < 2**15 - 1 else np.int32
    owner = np.full(train.n_users, -1, dtype=owner_type)
    place = np.zeros(train.n_users, dtype=np.int64)  # the user's place among its client's sorted users
    local = np.zeros(train.n_users, dtype=np.int64)
    for c, users in enumerate(parts):
        users = np.asarray(users)
        owner[users] = c
        place[np.sort(users)] = np.arange(len(users))
        local[users] = np.arange(len(users))
    rated_by = owner[train.user]
    by_client = np.argsort(rated_by, kind="stable")
    bounds = np.searchsorted(rated_by[by_client], np.arange(n_parts + 1))
    del rated_by
    n_items = max(train.n_items, 1)
    out = []
    for c, users in enumerate(parts):
        rows = by_client[bounds[c]:bounds[c + 1]]
        u = train.user[rows]
        key = place[u]
        key *= n_items
        key += train.item[rows]
        within = np.argsort(key)  # keys are distinct (no user rates an item twice): no ties to break
        del key
        rows, u = rows[within], u[within]
        it = train.item[rows].astype(np.int64)
        items = distinct_sorted(it)
        out.append({
            "user_index": np.asarray(users)[None].astype(np.int64),
            "user_mask": np.ones((1, len(users)), dtype=bool),
            "items": items[None], "item_mask": np.ones((1, len(items)), dtype=bool),
            "user": local[u][None], "item": np.searchsorted(items, it)[None],
            "rating": (train.rating[rows].astype(np.float64) - mean)[None],
            "mask": np.ones((1, len(rows)), dtype=bool),
        })
    return out


def client_arrays(train: Ratings, parts: list[np.ndarray], mean: float) -> State:
    """All clients' training data as one padded batch (see `client_data`)."""
    return stack(client_data(train, parts, mean))


def stack(batches: list[State]) -> State:
    """Concatenate batched dicts along the client axis, zero-padding every other axis to the largest."""
    out = {}
    for key in batches[0]:
        arrays = [b[key] for b in batches]
        shape = np.max([a.shape[1:] for a in arrays], axis=0) if arrays[0].ndim > 1 else ()
        n = sum(len(a) for a in arrays)
        res = np.zeros((n, *(max(int(x), 1) for x in shape)), dtype=arrays[0].dtype)
        i = 0
        for a in arrays:
            res[_block(i, len(a), a.shape[1:])] = a
            i += len(a)
        out[key] = res
    return out


def unstack(batch: State, like: list[State]) -> list[State]:
    """Split a batch of single clients back into dicts shaped like `like` (padding removed)."""
    return [{k: v[_block(i, 1, like[i][k].shape[1:])].copy()
             for k, v in batch.items()} for i in range(len(like))]


def _block(start: int, rows: int, shape: tuple[int, ...]) -> tuple[slice, ...]:
    """The index of rows start..start+rows and the leading `shape` of the other axes (padding left out)."""
    return tuple([slice(start, start + rows), *(slice(0, x) for x in shape)])
