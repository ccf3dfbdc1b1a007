"""`fedsentry simulate recsys` and `fedsentry bench recsys`: federated recommendation in one process."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import numpy as np

from fedsentry.cli.common import add_clients_arg, add_rating_columns, positive_float, positive_int, share, unit_open
from fedsentry.cli.simulate_flags import add_simulate_flags, check_simulated, family_of
from fedsentry.data import ratings as ratings_io
from fedsentry.errors import UsageError
from fedsentry.output import write_json
from fedsentry.runs.params import private_settings
from fedsentry.runs.recsys import prepare, simulate
from models.families import simulated
from models.recsys.data import CLIENT_SPLITS, Ratings

log = logging.getLogger("fedsentry.recsys")

#: the recommendation families that have a simulator
RATINGS = simulated("ratings")
#: what `bench recsys` runs by default: every algorithm, and FedMC-ADMM with both regularisers
BENCH_RUNS = ("fedmc-admm", "fedmc-admm-l1", "fedmavg", "altgdmin", "centralized")


def register(groups: dict[str, Any], verbs: Any) -> None:
    if not RATINGS:
        return
    # `simulate recsys` and `bench recsys` read ratings (their data flags and queries are about recommendation)
    sim = groups["simulate"].add_parser("recsys", help="federated recommendation (matrix completion), in one process")
    add_data_args(sim)
    add_clients_arg(sim)
    add_recsys_args(sim)
    sim.add_argument("--recommend", metavar="USER_ID", help="after training, the top-N unrated items for this "
                     "known user, computed on the client that holds the user")
    sim.add_argument("--fold-in", metavar="ITEM=RATING,...", help="after training, the top-N items for a new user "
                     "given only these ratings (nothing stored)")
    sim.add_argument("--private-dropout", type=share, metavar="SHARE", help="with --private: the share of each "
                     "round's devices that vanish after uploading (the secure sum still completes; at most 1/3)")
    sim.add_argument("--top", type=positive_int, default=10, help="length of the recommendation lists (default 10)")
    sim.add_argument("--json", metavar="PATH", help="write the result as JSON (- for stdout)")
    sim.set_defaults(func=run_simulate)

    bench = groups["bench"].add_parser("recsys", help="every recommendation algorithm on one split")
    add_data_args(bench)
    add_clients_arg(bench)
    add_recsys_args(bench, algorithm=False)
    bench.add_argument("--algorithms", default=",".join(BENCH_RUNS),
                       help=f"comma-separated (default: {','.join(BENCH_RUNS)}; fedmc-admm-l1 is fedmc-admm "
                       "with --regularizer l1)")
    bench.add_argument("--ranks", default="10,50", help="comma-separated ranks, every algorithm at each "
                       "(default 10,50; --rank is ignored)")
    bench.add_argument("--out", default="benchmarks/results", help="folder for the table, plot and JSON")
    bench.add_argument("--json", metavar="PATH", help="also write all results as JSON here (- for stdout)")
    bench.set_defaults(func=run_bench)


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (one of --dataset or --ratings)")
    g.add_argument("--dataset", help=f"named dataset: {', '.join(ratings_io.DATASETS)} (default movielens-small "
                   "where the shared data is present, synthetic otherwise; synthetic-longtail: 6,000 users x 3,000 "
                   "items, 180,200 half-star ratings, Zipf item tail; netflix-synthetic: 480,189 users x "
                   "17,770 items, 100M ratings, 1-5 stars; both generated in memory)")
    g.add_argument("--synthetic-scale", type=positive_float, metavar="F",
                   help="netflix-synthetic: this share of its users and ratings, all its items (default 1)")
    g.add_argument("--ratings", metavar="CSV", help="any ratings CSV with a header")
    add_rating_columns(g)
    g.add_argument("--data-dir", help="where named datasets live (default $FEDSENTRY_DATA_DIR or ../shared/data)")
    g.add_argument("--test-share", type=unit_open, default=0.2, help="share of the ratings held out (default 0.2)")


def add_recsys_args(p: argparse.ArgumentParser, *, algorithm: bool = True) -> None:
    """The recommendation families' flags (generated from their specs: fedsentry/cli/simulate_flags.py), then how
    users are grouped into clients."""
    add_simulate_flags(p, RATINGS, algorithm=algorithm)
    p.add_argument("--client-split", choices=CLIENT_SPLITS, default="random",
                   help="how users are grouped into clients (default random; activity: sorted by activity)")


def parse_queries(args: argparse.Namespace, data: Ratings) -> dict[str, Any]:
    """--recommend and --fold-in, checked against the data before any training starts."""
    queries: dict[str, Any] = {"top": args.top}
    if args.recommend is not None:
        uid = _id_like(args.recommend, data.user_ids)
        hit = np.flatnonzero(data.user_ids == uid) if uid is not None else np.zeros(0, dtype=np.intp)
        if not len(hit):
            raise UsageError(f"--recommend: unknown user id {args.recommend!r} (not in {data.name})")
        queries["recommend_user"] = int(hit[0])
    if args.fold_in is not None:
        items, values = [], []
        for pair in (p.strip() for p in args.fold_in.split(",") if p.strip()):
            item, sep, value = pair.partition("=")
            if not sep:
                raise UsageError(f"--fold-in: expected ITEM=RATING pairs separated by commas, got {pair!r}")
            iid = _id_like(item.strip(), data.item_ids)
            if iid is None or not (data.item_ids == iid).any():
                raise UsageError(f"--fold-in: unknown item id {item.strip()!r} (not in {data.name})")
            try:
                v = float(value)
            except ValueError:
                raise UsageError(f"--fold-in: rating {value.strip()!r} for item {item.strip()} is not a number"
                                 ) from None
            if not data.rating_min <= v <= data.rating_max:
                raise UsageError(f"--fold-in: rating {v:g} for item {item.strip()} is outside "
                                 f"{data.rating_min:g}..{data.rating_max:g}")
            items.append(iid)
            values.append(v)
        if not items:
            raise UsageError("--fold-in: give at least one ITEM=RATING pair")
        if len(set(items)) != len(items):
            raise UsageError("--fold-in: an item is given twice")
        queries["fold_in_pairs"] = (np.array(items), np.array(values))
    return queries


def _id_like(text: str, ids: np.ndarray):
    """The query id in the type of the data's ids (None if it cannot be one of them)."""
    if ids.dtype.kind in "iu":
        try:
            return int(text)
        except ValueError:
            return None
    return str(text)


def run_simulate(args: argparse.Namespace) -> int:
    check_simulated(args, family_of(args, RATINGS))
    if args.regularizer == "l1" and args.algorithm != "fedmc-admm":
        raise UsageError(f"--regularizer l1 is a fedmc-admm option; {args.algorithm} uses l2")
    prep = prepare(args, [args.rank])
    queries = parse_queries(args, prep.ratings)
    private, dropout = private_settings(args)
    queries.update(private=private, dropout=dropout)
    result = simulate(args, prep, args.algorithm, args.rank, queries)
    if "recommendations" in result:
        for entry in result["recommendations"].values():
            if "user" in entry:
                entry["user"] = prep.ratings.user_ids[entry["user"]].item()
    log.info("%s on %s (rank %d, %d clients, %.0f%% per round, %d rounds): test_rmse=%.4f test_mae=%.4f "
             "seconds_per_round=%.5f upload_bytes_per_client_round=%s", result["algorithm"], result["dataset"],
             args.rank, len(prep.parts), 100 * args.fraction, args.rounds, result["test_rmse"], result["test_mae"],
             result["seconds_per_round"], result["upload_bytes_per_client_round"])
    write_json(result, args.json)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from fedsentry.bench.recsys import bench

    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = [a for a in algorithms if a not in BENCH_RUNS]
    if unknown or not algorithms:
        raise UsageError(f"--algorithms: unknown {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(BENCH_RUNS)}")
    try:
        ranks = [int(r) for r in args.ranks.split(",") if r.strip()]
    except ValueError:
        raise UsageError(f"--ranks: expected comma-separated whole numbers, got {args.ranks!r}") from None
    if not ranks or min(ranks) < 1:
        raise UsageError("--ranks: give at least one rank, each at least 1")
    prep = prepare(args, ranks)
    t0 = time.perf_counter()
    result = bench(args, prep, algorithms, ranks)
    log.info("bench recsys on %s: %d runs in %.0f s", prep.ratings.name, len(result["runs"]), time.perf_counter() - t0)
    write_json(result, args.json)
    return 0
