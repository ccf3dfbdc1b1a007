"""In-process federated recommendation: the same client and server steps a deployment runs, in a loop.

Seeded and reproducible. Each client's data and state are kept as a batch of one, exactly what a device
holds; the sampled clients of a round are padded into one batch (`data.stack`), so the client step is
vectorised over them, and split back afterwards. A round's time (seconds_per_round) covers batching,
the client and server steps and unbatching; evaluation is not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.federated import State
from models.recsys import make_algorithm
from models.recsys.base import RecsysAlgorithm
from models.recsys.data import Ratings, client_data, count_distinct, global_mean, stack, unstack
from models.recsys.factors import predict_pairs
from models.recsys.metrics import mae, rmse
from models.recsys.recommend import ItemModel, fold_in, recommend_top_n, top_n
from models.rounds import run_round, sample_clients


@dataclass
class ClientRatings:
    """What the clients hold after the statistics phase: their (centred) training ratings, batched."""

    train: Ratings
    parts: list[np.ndarray]  # global user indices per client
    mean: float  # global mean rating, from each client's count and sum
    data: list[State]  # each client's arrays as a batch of one (`client_data`)
    weight: np.ndarray  # (N,) each client's share of the training ratings, n_i / mean(n)

    @property
    def n_clients(self) -> int:
        return len(self.parts)


def prepare_clients(train: Ratings, parts: list[np.ndarray]) -> ClientRatings:
    """Statistics phase: every client sends its rating count and sum once; the global mean follows."""
    owner = np.empty(train.n_users, dtype=np.int64)
    for c, users in enumerate(parts):
        owner[users] = c
    rated_by = owner[train.user]
    counts = np.bincount(rated_by, minlength=len(parts)).astype(float)
    sums = np.bincount(rated_by, weights=train.rating, minlength=len(parts))
    del rated_by
    mean = global_mean(counts, sums)
    weight = counts / counts.mean() if counts.mean() > 0 else np.ones(len(parts))
    return ClientRatings(train, parts, mean, client_data(train, parts, mean), weight)


def gather_users(data: list[State], states: list[State], n_users: int) -> np.ndarray:
    """The clients' private user factors in one (n_users, rank+1) array, for evaluation only."""
    out = np.zeros((n_users, states[0]["user_factors"].shape[-1]))
    for d, s in zip(data, states):
        out[d["user_index"][d["user_mask"]]] = s["user_factors"][d["user_mask"]]
    return out


#: ratings evaluated at a time: two (chunk, rank+1) float64 gathers, about 350 MB each at rank 10
EVAL_CHUNK = 1 << 22


class Evaluator:
    """Test RMSE/MAE (original scale, clipped, pooled) and the training objective per training rating.

    Predictions are made `chunk` ratings at a time (gathering every rating's user and item rows at once
    would take 2 x 8 (rank+1) bytes per rating: 17 GB for 100M ratings at rank 10) into one array of
    per-rating values, which is then reduced exactly as before: the figures do not depend on `chunk`."""

    def __init__(self, clients: ClientRatings, test: Ratings, chunk: int = EVAL_CHUNK):
        if chunk < 1:
            raise ValueError("chunk must be at least 1")
        self.clients, self.test, self.chunk = clients, test, int(chunk)

    def predictions(self, P: np.ndarray, Q: np.ndarray, ratings: Ratings, offset: float) -> np.ndarray:
        """predict_pairs(P[user], Q[item]) - (rating - offset) for every rating, chunk by chunk."""
        out = np.empty(len(ratings))
        for s in range(0, len(ratings), self.chunk):
            e = min(s + self.chunk, len(ratings))
            u, i = ratings.user[s:e], ratings.item[s:e]
            out[s:e] = predict_pairs(P[u], Q[i]) - (ratings.rating[s:e] - offset)
        return out

    def __call__(self, P: np.ndarray, Q: np.ndarray, penalty: float) -> dict[str, float]:
        t, tr, mean = self.test, self.clients.train, self.clients.mean
        pred = np.empty(len(t))
        for s in range(0, len(t), self.chunk):
            e = min(s + self.chunk, len(t))
            pred[s:e] = predict_pairs(P[t.user[s:e]], Q[t.item[s:e]])
        pred += mean
        np.clip(pred, t.rating_min, t.rating_max, out=pred)
        test_rmse, test_mae = rmse(pred, t.rating), mae(pred, t.rating)
        del pred
        resid = self.predictions(P, Q, tr, mean)
        half_sq = 0.5 * (resid @ resid)
        np.square(resid, out=resid)
        return {"test_rmse": test_rmse, "test_mae": test_mae,
                "train_rmse": float(np.sqrt(np.mean(resid))),
                "objective": float((half_sq + penalty) / max(len(resid), 1))}


@dataclass
class RecsysRun:
    user_factors: np.ndarray  # (n_users, rank+1), gathered from the clients for evaluation
    item_factors: np.ndarray  # (n_items, rank+1)
    history: list[dict[str, float]]
    seconds_per_round: float
    upload_bytes_per_client_round: float
    setup_seconds: float = 0.0
    states: list[State] | None = None  # each client's final state (federated runs)


def run_federated(
    algorithm: RecsysAlgorithm,
    clients: ClientRatings,
    test: Ratings,
    rounds: int,
    fraction: float,
    seed: int = 0,
    on_round: Callable[[dict[str, float]], None] | None = None,
) -> RecsysRun:
    """Drive an algorithm for `rounds` rounds with a fraction of the clients sampled each round."""
    rng = np.random.default_rng(seed)
    N = clients.n_clients
    data = clients.data
    evaluate = Evaluator(clients, test)
    t0 = time.perf_counter()
    server, broadcast = algorithm.init_server(N, rng)
    states = [algorithm.init_clients(d, broadcast) for d in data]
    for _ in range(algorithm.setup_rounds):
        uploads = algorithm.client_setup(stack(states), stack(data), broadcast)
        server, broadcast = algorithm.server_setup(server, uploads)
    setup_seconds = time.perf_counter() - t0
    history: list[dict[str, float]] = []
    train_time, sent = 0.0, []
    for r in range(1, rounds + 1):
        idx = sample_clients(rng, N, fraction)
        t0 = time.perf_counter()
        old = [states[i] for i in idx]
        done = run_round(algorithm, server, broadcast, idx, stack(old), stack([data[i] for i in idx]),
                         clients.weight[idx])
        server, broadcast = done.server, done.broadcast
        for i, s in zip(idx, unstack(done.states, old)):
            states[i] = s
        train_time += time.perf_counter() - t0
        sent.extend(algorithm.payload_bytes(done.uploads).tolist())
        P = gather_users(data, states, clients.train.n_users)
        Q = algorithm.item_factors(broadcast)
        entry = {"round": r, **evaluate(P, Q, algorithm.penalty(P, Q))}
        history.append(entry)
        if on_round:
            on_round(entry)
    P = gather_users(data, states, clients.train.n_users)
    return RecsysRun(P, algorithm.item_factors(broadcast), history, train_time / max(rounds, 1),
                     float(np.mean(sent)) if sent else 0.0, setup_seconds, states)


def simulate_recsys(
    train: Ratings,
    test: Ratings,
    parts: list[np.ndarray],
    algorithm: str = "fedmc-admm",
    rank: int = 10,
    rounds: int = 100,
    fraction: float = 0.1,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    on_round: Callable[[dict[str, float]], None] | None = None,
    recommend_user: int | None = None,
    fold_in_pairs: tuple[np.ndarray, np.ndarray] | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """Train one algorithm on the clients' training ratings and evaluate it on the test ratings.

    recommend_user (a user index) and fold_in_pairs ((item ids, ratings) of a new user) add top-`top`
    lists computed as a deployment would: on the user's client, and at the server without storing."""
    limit = min(count_distinct(train.user, train.n_users), count_distinct(train.item, train.n_items)) - 1
    if not 1 <= rank <= limit:
        raise ValueError(f"rank must be between 1 and {limit} (min(users, items) - 1 for these ratings), "
                         f"got {rank}")
    clients = prepare_clients(train, parts)
    params = dict(params or {})
    out: dict[str, Any] = {"algorithm": algorithm, "rank": rank, "rounds": rounds}
    if algorithm == "centralized":
        from models.recsys.centralized import ALS, run_centralized

        run = run_centralized(clients, test, rank, rounds, seed, params, on_round)
        lam = ALS(rank, **{k: v for k, v in params.items() if k in ("lam", "gamma") and v is not None}).lam
        out["upload_bytes_per_client_round"] = None
    else:
        alg = make_algorithm(algorithm, train.n_items, rank, **params)
        run = run_federated(alg, clients, test, rounds, fraction, seed, on_round)
        lam = alg.lam
        out.update(alg.describe())
        out["upload_bytes_per_client_round"] = run.upload_bytes_per_client_round
    last = run.history[-1]
    out.update(test_rmse=last["test_rmse"], test_mae=last["test_mae"], train_rmse=last["train_rmse"],
               seconds_per_round=run.seconds_per_round, setup_seconds=run.setup_seconds, global_mean=clients.mean,
               global_mean_test_rmse=rmse(np.full(len(test), clients.mean), test.rating),
               history=[{k: h[k] for k in ("round", "test_rmse", "objective", "train_rmse")} for h in run.history])
    model = ItemModel(train.item_ids, run.item_factors, clients.mean, train.rating_min, train.rating_max, lam)
    recs: dict[str, Any] = {}
    if recommend_user is not None:
        recs["known_user"] = _recommend_known(model, clients, run, recommend_user, top)
    if fold_in_pairs is not None:
        t0 = time.perf_counter()
        found = fold_in(model, fold_in_pairs[0], fold_in_pairs[1], top)
        recs["fold_in"] = {"seconds": time.perf_counter() - t0, "items": found.as_list()}
    if recs:
        out["recommendations"] = recs
    return out


def _recommend_known(model: ItemModel, clients: ClientRatings, run: RecsysRun, user: int, top: int) -> dict:
    """Where the user's factors live: on its client (federated), or at the server (centralized)."""
    t0 = time.perf_counter()
    if run.states is not None:
        c = next(i for i, users in enumerate(clients.parts) if user in users)
        found = recommend_top_n(model, run.states[c], clients.data[c], user, top)
        where = f"client {c}"
    else:
        rated = clients.train.item[clients.train.user == user]
        found = top_n(model, run.user_factors[user], rated, top)
        where = "server (centralized)"
    return {"user": user, "computed_on": where, "seconds": time.perf_counter() - t0, "items": found.as_list()}
