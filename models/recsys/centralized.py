"""The centralised reference: regularised matrix factorisation with biases by alternating least squares.

All training ratings pooled in one place (no federation, no privacy): the quality the federated
algorithms aim for. One round is one sweep: every user's packed row [u_t, b_t] is a ridge regression
on its items' [v_j, 1], then every item's [v_j, c_j] on its raters' [u_t, 1] (lam for users, gamma for
items, the same objective FedMC-ADMM minimises).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from models.recsys.data import Ratings
from models.recsys.evaluation import ClientRatings, Evaluator, RecsysRun
from models.recsys.factors import normal_equations, regularizer_value, ridge_solve


class ALS:
    """Alternating least squares with biases; hyper-parameters here, learned factors after `fit`."""

    def __init__(self, rank: int = 10, lam: float = 12.0, gamma: float = 12.0, init_scale: float = 0.1):
        if rank < 1:
            raise ValueError("rank must be at least 1")
        self.rank, self.lam, self.gamma, self.init_scale = int(rank), float(lam), float(gamma), float(init_scale)

    def start(self, n_users: int, n_items: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        Q = self.init_scale * rng.standard_normal((n_items, self.rank + 1))
        Q[:, -1] = 0.0
        return np.zeros((n_users, self.rank + 1)), Q

    def sweep(self, users: np.ndarray, items: np.ndarray, target: np.ndarray, n_users: int, n_items: int,
              Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One user half-sweep then one item half-sweep; ratings centred on the global mean."""
        by_user = np.lexsort((items, users))
        ptr = np.searchsorted(users[by_user], np.arange(n_users + 1))
        P = ridge_solve(*normal_equations(Q[items[by_user]], target[by_user], ptr), self.lam)
        by_item = np.lexsort((users, items))
        ptr = np.searchsorted(items[by_item], np.arange(n_items + 1))
        Q = ridge_solve(*normal_equations(P[users[by_item]], target[by_item], ptr), self.gamma)
        return P, Q

    def penalty(self, P: np.ndarray, Q: np.ndarray) -> float:
        return regularizer_value(P, self.lam) + regularizer_value(Q, self.gamma)


def run_centralized(clients: ClientRatings, test: Ratings, rank: int, rounds: int, seed: int, params: dict[str, Any],
                    on_round: Callable[[dict[str, float]], None] | None = None) -> RecsysRun:
    """ALS on the pooled training ratings of all clients, `rounds` sweeps, evaluated like the federated runs."""
    als = ALS(rank, **{k: v for k, v in params.items() if k in ("lam", "gamma", "init_scale") and v is not None})
    train = clients.train
    target = train.rating - clients.mean
    evaluate = Evaluator(clients, test)
    P, Q = als.start(train.n_users, train.n_items, np.random.default_rng(seed))
    history, spent = [], 0.0
    for r in range(1, rounds + 1):
        t0 = time.perf_counter()
        P, Q = als.sweep(train.user, train.item, target, train.n_users, train.n_items, Q)
        spent += time.perf_counter() - t0
        entry = {"round": r, **evaluate(P, Q, als.penalty(P, Q))}
        history.append(entry)
        if on_round:
            on_round(entry)
    return RecsysRun(P, Q, history, spent / max(rounds, 1), 0.0)
