"""In-process federated recommendation: the same client and server steps a deployment runs, in a loop.

Seeded and reproducible. Each client's data and state are kept as a batch of one, exactly what a device
holds; the sampled clients of a round are padded into one batch (`data.stack`), so the client step is
vectorised over them, and split back afterwards. A round's time (seconds_per_round) covers batching,
the client and server steps and unbatching; evaluation is not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from models.core.federated import State
from models.core.rounds import Hooks, ListPool, RoundResult, Rounds, simulate
from models.core.sampling import per_round
from models.recsys import FEDERATED, make_algorithm
from models.recsys.base import RecsysAlgorithm
from models.recsys.centralized import ALS, run_centralized
from models.recsys.data import Ratings, count_distinct, stack, unstack
from models.recsys.evaluation import ClientRatings, Evaluator, RecsysRun, prepare_clients
from models.recsys.metrics import rmse
from models.recsys.recommend import ItemModel, fold_in, recommend_top_n, top_n


def gather_users(data: list[State], states: list[State], n_users: int) -> np.ndarray:
    """The clients' private user factors in one (n_users, rank+1) array, for evaluation only."""
    out = np.zeros((n_users, states[0]["user_factors"].shape[-1]))
    for d, s in zip(data, states):
        out[d["user_index"][d["user_mask"]]] = s["user_factors"][d["user_mask"]]
    return out


def run_federated(
    algorithm: RecsysAlgorithm,
    clients: ClientRatings,
    test: Ratings,
    rounds: int,
    fraction: float,
    seed: int = 0,
    on_round: Callable[[dict[str, float]], None] | None = None,
    receive: Callable[[np.ndarray, State], State] | None = None,
) -> RecsysRun:
    """Drive an algorithm for `rounds` rounds with a fraction of the clients sampled each round. `receive`: what
    the server gets of each round's uploads, setup rounds included (private mode: their secure sum)."""
    rng = np.random.default_rng(seed)
    data = clients.data
    evaluate = Evaluator(clients, test)
    t0 = time.perf_counter()
    loop = Rounds.start(algorithm, clients.n_clients, fraction, rng)
    pool = ListPool(data, [algorithm.init_clients(d, loop.broadcast) for d in data], stack, unstack)
    sent: list[float] = []  # training rounds' plaintext uploads, per device
    setup_sent: list[float] = []  # the setup rounds'
    everyone = np.arange(clients.n_clients)
    for _ in range(algorithm.setup_rounds):
        uploads = algorithm.client_setup(stack(pool.states), stack(data), loop.broadcast)
        setup_sent.extend(algorithm.payload_bytes(uploads).tolist())
        received = receive(everyone, uploads) if receive is not None else uploads
        loop.server, loop.broadcast = algorithm.server_setup(loop.server, received)
    setup_seconds = time.perf_counter() - t0
    history: list[dict[str, float]] = []

    def observe(idx: np.ndarray, done: RoundResult) -> None:  # evaluation: not timed
        sent.extend(algorithm.payload_bytes(done.uploads).tolist())
        P = gather_users(data, pool.states, clients.train.n_users)
        Q = algorithm.item_factors(done.broadcast)
        entry = {"round": len(history) + 1, **evaluate(P, Q, algorithm.penalty(P, Q))}
        history.append(entry)
        if on_round:
            on_round(entry)

    hooks = simulate(loop, pool, clients.weight, rounds, Hooks(observe=observe, receive=receive))
    P = gather_users(data, pool.states, clients.train.n_users)
    # per device and round, setup rounds included: what every device sent over the device-rounds it answered
    device_round = float(np.mean(sent + setup_sent)) if sent or setup_sent else 0.0
    return RecsysRun(P, algorithm.item_factors(loop.broadcast), history, sum(hooks.seconds) / max(rounds, 1),
                     float(np.mean(sent)) if sent else 0.0, setup_seconds, pool.states, device_round)


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
    private: bool = False,
    dropout: float = 0.0,
) -> dict[str, Any]:
    """Train one algorithm on the clients' training ratings and evaluate it on the test ratings.

    private: the server step receives only the secure sum of each round's uploads (models.recsys.private), with
    `dropout` of each round's devices vanishing after they uploaded.

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
        if private:
            raise ValueError("private mode: centralized is not federated (every rating goes to the server); choose "
                             f"one of {', '.join(FEDERATED)}")
        run = run_centralized(clients, test, rank, rounds, seed, params, on_round)
        lam = ALS(rank, **{k: v for k, v in params.items() if k in ("lam", "gamma") and v is not None}).lam
        out["upload_bytes_per_client_round"] = None
    else:
        alg = make_algorithm(algorithm, train.n_items, rank, **params)
        summed = None
        if private:
            asked = per_round(clients.n_clients, fraction)
            if asked < 2:
                raise ValueError(f"private mode sums at least 2 devices a round; {clients.n_clients} clients at "
                                 f"fraction {fraction:g} sample {asked} (raise --fraction or --clients)")
            from models.recsys.private import SummedRecsys

            summed = SummedRecsys(alg, max(len(p) for p in parts), dropout, seed)
        run = run_federated(alg, clients, test, rounds, fraction, seed, on_round, summed)
        lam = alg.lam
        out.update(alg.describe())
        out["private"] = private
        out["upload_bytes_per_client_round"] = run.upload_bytes_per_client_round
        out["upload_bytes_per_device_round"] = run.upload_bytes_per_device_round
        if summed is not None:  # the private run's own bytes, the plaintext's beside them
            out.update(summed.report(), plaintext_upload_bytes_per_device_round=run.upload_bytes_per_device_round)
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
