"""A federated recommendation run in one process from command-line settings: load, split, simulate.

Used by `fedsentry simulate recsys`, `bench recsys` and the demo."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsentry.data import ratings as ratings_io
from fedsentry.errors import UsageError
from fedsentry.output import progress, single_blas_thread
from fedsentry.runs.params import flag_params, simulated_params
from models.recsys import FEDERATED
from models.recsys.data import Ratings, count_distinct, split_users, train_test_split
from models.recsys.spec import RecsysJobSpec

log = logging.getLogger("fedsentry.recsys")
#: the family this module simulates (it runs models.recsys.simulator)
FAMILY = RecsysJobSpec.family


@dataclass
class Prepared:
    ratings: Ratings
    train: Ratings
    test: Ratings
    parts: list[np.ndarray]


def load_ratings(args: argparse.Namespace) -> Ratings:
    if args.dataset and args.ratings:
        raise UsageError("give only one of --dataset and --ratings")
    if not args.rating_min < args.rating_max:
        raise UsageError(f"--rating-min {args.rating_min:g} must be below --rating-max {args.rating_max:g}")
    if args.ratings:
        return ratings_io.load_ratings_csv(args.ratings, args.user_col, args.item_col, args.rating_col,
                                           args.rating_min, args.rating_max)
    scale = getattr(args, "synthetic_scale", None)
    if args.ratings and scale is not None:
        raise UsageError("--synthetic-scale applies to --dataset netflix-synthetic only")
    name = args.dataset or ("movielens-small" if ratings_io.movielens_available(args.data_dir) else "synthetic")
    return ratings_io.load_named(name, args.data_dir, args.seed, args.rating_min, args.rating_max, scale)


def prepare(args: argparse.Namespace, ranks: list[int]) -> Prepared:
    """Load, split 80/20 (seeded) and group users into clients, validating against the data."""
    data = load_ratings(args)
    if len(data) < 2:
        raise UsageError(f"{data.name}: need at least 2 ratings to split into training and test")
    train, test = train_test_split(data, args.test_share, seed=args.seed)
    users, items = count_distinct(train.user, train.n_users), count_distinct(train.item, train.n_items)
    limit = min(users, items) - 1
    for rank in ranks:
        if rank > limit:
            raise UsageError(f"--rank {rank} is larger than the data allows: the training ratings have "
                             f"{users} users and {items} items, so at most {max(limit, 0)}")
    if args.clients > data.n_users:
        raise UsageError(f"--clients {args.clients} is more than the {data.n_users} users (each client needs one)")
    activity = np.bincount(train.user, minlength=train.n_users)
    parts = split_users(train.n_users, args.clients, args.client_split, np.random.default_rng(args.seed), activity)
    return Prepared(data, train, test, parts)


def simulate(args: argparse.Namespace, prep: Prepared, algorithm: str, rank: int,
             queries: dict[str, Any] | None = None, strict: bool = True) -> dict[str, Any]:
    from models.recsys.simulator import simulate_recsys

    regularizer = None
    if algorithm == "fedmc-admm-l1":
        algorithm, regularizer = "fedmc-admm", "l1"
    rounds = args.rounds
    bar = progress(rounds, f"{algorithm} r{rank}")

    def on_round(entry: dict[str, float]) -> None:
        if bar is not None:
            bar.update(1)
            bar.set_postfix(rmse=f"{entry['test_rmse']:.4f}")
        log.debug("round=%d algorithm=%s test_rmse=%.4f objective=%.4f", entry["round"], algorithm,
                  entry["test_rmse"], entry["objective"])

    try:
        with single_blas_thread(algorithm != "centralized"):
            given = simulated_params(args, FAMILY, **({"regularizer": regularizer} if regularizer else {}))
            params = flag_params(FEDERATED.get(algorithm), given, algorithm, strict)
            result = simulate_recsys(prep.train, prep.test, prep.parts, algorithm, rank, rounds, args.fraction,
                                     args.seed, params, on_round, **(queries or {}))
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        if bar is not None:
            bar.close()
    result.update(dataset=prep.ratings.name, clients=len(prep.parts), fraction=args.fraction,
                  client_split=args.client_split, seed=args.seed, n_users=prep.ratings.n_users,
                  n_items=prep.ratings.n_items, n_train=len(prep.train), n_test=len(prep.test),
                  rating_range=[prep.ratings.rating_min, prep.ratings.rating_max])
    return result

