"""Recommending from a trained model: pure functions the API calls.

A known user's factors are private, so their top-N list is computed where they live, on their client,
from the client's state and the item model it received (`recommend_top_n`). A new user is *folded in*
at the server from a handful of (item, rating) pairs sent with the request: their packed row [u, b] is
the ridge regression of those ratings on the item factors, nothing is stored (`fold_in`). Both rank the
items the user has not rated by predicted score. Items are named by their original ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.core.federated import State
from models.recsys.factors import design, predict_pairs, ridge_solve


@dataclass(frozen=True)
class ItemModel:
    """What a client receives and the server can serve from: the catalogue and its shared factors."""

    item_ids: np.ndarray  # (n_items,) original ids, in index order
    item_factors: np.ndarray  # (n_items, rank + 1) packed [v_j, c_j]; zero rows for untrained items
    mean: float  # global mean rating
    rating_min: float = 0.5
    rating_max: float = 5.0
    lam: float = 10.0  # ridge weight of a folded-in user's row

    def index_of(self, ids: np.ndarray | list) -> np.ndarray:
        """Catalogue positions of item ids; ValueError naming the first unknown one."""
        ids = np.asarray(ids)
        if ids.dtype.kind != self.item_ids.dtype.kind:
            try:
                ids = ids.astype(self.item_ids.dtype)
            except ValueError:
                raise ValueError(f"unknown item id {_plain(ids.flat[0])!r}: catalogue ids are "
                                 f"{'text' if self.item_ids.dtype.kind == 'U' else 'numbers'}") from None
        order = np.argsort(self.item_ids, kind="stable")
        pos = np.searchsorted(self.item_ids, ids, sorter=order)
        pos = np.minimum(pos, len(order) - 1)
        found = self.item_ids[order[pos]] == ids
        if not found.all():
            raise ValueError(f"unknown item id {_plain(ids[~found][0])!r}: not in the catalogue of "
                             f"{len(self.item_ids)} items")
        return order[pos]


@dataclass(frozen=True)
class Recommendations:
    item_ids: np.ndarray  # best first
    scores: np.ndarray  # predicted ratings on the original scale (clipped to the range)

    def as_list(self) -> list[dict]:
        return [{"item": _plain(i), "predicted_rating": float(s)} for i, s in zip(self.item_ids, self.scores)]


def top_n(model: ItemModel, user_row: np.ndarray, exclude: np.ndarray, n: int = 10) -> Recommendations:
    """The n best items for a packed user row [u, b], leaving out the catalogue positions in `exclude`.

    Ranked by the unclipped score (clipping would tie every item above the top of the scale)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    score = model.mean + predict_pairs(user_row[None, :], model.item_factors)
    score[np.asarray(exclude, dtype=np.int64)] = -np.inf
    k = min(n, int(np.isfinite(score).sum()))
    best = np.argpartition(-score, k - 1)[:k] if k else np.zeros(0, dtype=np.int64)
    best = best[np.lexsort((best, -score[best]))]
    return Recommendations(model.item_ids[best], np.clip(score[best], model.rating_min, model.rating_max))


def recommend_top_n(model: ItemModel, client_state: State, client_data: State, user: int,
                       n: int = 10) -> Recommendations:
    """On the client holding global user index `user`: top-n items that user has not rated in training.

    client_state / client_data are the client's own dicts (a batch of one, as on a device)."""
    held = client_data["user_index"][0][client_data["user_mask"][0]]
    where = np.flatnonzero(held == user)
    if not len(where):
        raise ValueError(f"user {user} is not held by this client")
    local = int(where[0])
    mask = client_data["mask"][0] & (client_data["user"][0] == local)
    rated = client_data["items"][0][client_data["item"][0][mask]]
    return top_n(model, client_state["user_factors"][0, local], rated, n)


def fold_in_row(model: ItemModel, items: np.ndarray, ratings: np.ndarray) -> np.ndarray:
    """The packed row [u, b] of a user from (catalogue position, rating) pairs: a ridge regression on the
    items' design rows [v_j, 1] with targets rating - mean - c_j."""
    Q = model.item_factors[items]
    D = design(Q)
    rhs = D.T @ (ratings - model.mean - Q[:, -1])
    return ridge_solve(D.T @ D, rhs, model.lam)


def fold_in(model: ItemModel, item_ids: np.ndarray | list, ratings: np.ndarray | list,
            n: int = 10) -> Recommendations:
    """Top-n items for a new user described only by the (item id, rating) pairs of the request.

    Nothing is stored. ValueError for unknown or repeated item ids, ratings outside the model's range,
    or no pairs at all."""
    ratings = np.asarray(ratings, dtype=float)
    item_ids = np.asarray(item_ids)
    if ratings.ndim != 1 or item_ids.shape != ratings.shape:
        raise ValueError("give as many ratings as item ids, as flat lists")
    if not len(ratings):
        raise ValueError("fold-in needs at least one (item, rating) pair")
    if not np.isfinite(ratings).all():
        raise ValueError("ratings must be finite numbers")
    bad = (ratings < model.rating_min) | (ratings > model.rating_max)
    if bad.any():
        raise ValueError(f"rating {ratings[bad][0]:g} is outside the range {model.rating_min:g}..{model.rating_max:g}")
    items = model.index_of(item_ids)
    if len(np.unique(items)) != len(items):
        raise ValueError("an item id is given twice")
    return top_n(model, fold_in_row(model, items, ratings), items, n)


def _plain(x: Any) -> Any:
    """A numpy scalar as the Python value (for messages and JSON)."""
    return x.item() if hasattr(x, "item") else x
