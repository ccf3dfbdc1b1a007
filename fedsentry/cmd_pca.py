"""`fedsentry simulate pca` and `fedsentry bench pca`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import numpy as np

from fedsentry import datasets
from fedsentry.cmd_common import (
    add_federation_args,
    positive_float,
    positive_int,
    progress,
    share,
    unit_open,
    write_json,
)
from fedsentry.errors import UsageError
from models.partition import PARTITIONS, partition
from models.pca import ALGORITHMS
from models.robust import TRIM_CRITERIA

log = logging.getLogger("fedsentry.pca")


def register(groups: dict[str, Any], verbs: Any) -> None:
    sim = groups["simulate"].add_parser("pca", help="federated PCA anomaly detection, in one process")
    add_data_args(sim)
    add_federation_args(sim)
    add_pca_args(sim)
    sim.add_argument("--algorithm", choices=ALGORITHMS, default="fedpg")
    sim.add_argument("--json", metavar="PATH", help="write the result as JSON (- for stdout)")
    sim.set_defaults(func=run_simulate)

    bench = groups["bench"].add_parser("pca", help="every PCA algorithm and IsolationForest on one split")
    add_data_args(bench)
    add_federation_args(bench)
    add_pca_args(bench)
    bench.add_argument("--out", default="benchmarks/results", help="folder for the table and plot")
    bench.add_argument("--json", metavar="PATH", help="write all results as JSON (- for stdout)")
    bench.add_argument("--quick", action="store_true", help="fewer scoring repetitions (for tests)")
    bench.set_defaults(func=run_bench)


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (one of --dataset, --normal/--abnormal, --csv)")
    g.add_argument("--dataset", help=f"named dataset: {', '.join(datasets.DATASETS)} (default nsl-kdd where "
                   "the shared data is present, synthetic otherwise)")
    g.add_argument("--normal", metavar="CSV", help="CSV of normal records")
    g.add_argument("--abnormal", metavar="CSV", help="CSV of attack records")
    g.add_argument("--csv", metavar="CSV", help="one CSV with a label column")
    g.add_argument("--label-column", help="label column (default: label, outcome, class or attack)")
    g.add_argument("--normal-value", default="0", help="label value of normal rows with --csv (default 0)")
    g.add_argument("--data-dir", help="where named datasets live (default $FEDSENTRY_DATA_DIR or ../shared/data)")
    g.add_argument("--contamination", type=share, default=0.0,
                   help="mix this share of attack rows into the training records (default 0)")


def add_pca_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rank", type=positive_int, default=3, help="subspace dimension k (default 3)")
    p.add_argument("--local-steps", type=positive_int, default=10, help="local steps per round (default 10)")
    p.add_argument("--rho", type=positive_float, help="ADMM penalty (default: the number of features)")
    p.add_argument("--lr", type=positive_float, help="local step size (default: 1/L from each client's curvature)")
    p.add_argument("--oversample", type=int, default=6, help="fedmm: extra block columns (default 6)")
    p.add_argument("--bits", type=int, choices=range(2, 17), metavar="{2..16}", help="fedmm: quantise uploads")
    p.add_argument("--partition", choices=PARTITIONS, default="noniid", help="how records are split (default noniid)")
    p.add_argument("--partition-feature", help="noniid: feature to sort on (default: most distinct values)")
    p.add_argument("--alpha", type=positive_float, default=0.5, help="dirichlet: concentration (default 0.5)")
    p.add_argument("--quantile", type=unit_open, default=0.99, help="threshold quantile of normal errors (0.99)")
    p.add_argument("--trim", type=share, default=0.0,
                   help="leave this share of the most suspicious training records out of the statistics (default 0)")
    p.add_argument("--trim-by", choices=TRIM_CRITERIA, default="distance",
                   help="distance: federation-wide cut on distance from the mean (default); residual: each "
                   "client drops its worst-reconstructed share, re-evaluated as Z improves")


def load_data(args: argparse.Namespace) -> datasets.TrafficData:
    given = [n for n, v in (("--dataset", args.dataset), ("--normal/--abnormal", args.normal or args.abnormal),
                            ("--csv", args.csv)) if v]
    if len(given) > 1:
        raise UsageError(f"give only one of {', '.join(given)}")
    if args.normal or args.abnormal:
        if not (args.normal and args.abnormal):
            raise UsageError("--normal and --abnormal go together")
        return datasets.load_pair(args.normal, args.abnormal, label_column=args.label_column)
    if args.csv:
        return datasets.load_labelled_csv(args.csv, args.label_column, args.normal_value)
    name = args.dataset or ("nsl-kdd" if datasets.shared_data_available("nsl-kdd", args.data_dir) else "synthetic")
    return datasets.load_named(name, args.data_dir, seed=args.seed)


def prepare(args: argparse.Namespace):
    """Load, split and partition: (data, split, client parts)."""
    data = load_data(args)
    d = len(data.feature_names)
    if args.rank >= d:
        raise UsageError(f"--rank {args.rank} must be smaller than the number of features ({d})")
    split = datasets.train_test_split(data, seed=args.seed, contamination=args.contamination)
    if args.clients > len(split.X_train):
        raise UsageError(f"--clients {args.clients} is more than the {len(split.X_train)} training records")
    feature = None
    if args.partition_feature:
        if args.partition_feature not in data.feature_names:
            raise UsageError(f"--partition-feature {args.partition_feature!r} is not a feature "
                             f"(features: {', '.join(data.feature_names)})")
        feature = data.feature_names.index(args.partition_feature)
    idx = partition(split.X_train, args.clients, args.partition, np.random.default_rng(args.seed), feature,
                    args.alpha)
    return data, split, [split.X_train[i] for i in idx]


def algorithm_params(args: argparse.Namespace) -> dict[str, Any]:
    return {"rho": args.rho, "local_steps": args.local_steps, "lr": args.lr, "oversample": args.oversample,
            "bits": args.bits}


def simulate(args: argparse.Namespace, algorithm: str, data, split, parts, params: dict[str, Any] | None = None,
             **overrides: Any) -> dict[str, Any]:
    """Run one algorithm with the command's settings; overrides replace settings (rounds, fraction, trim),
    params replace algorithm parameters."""
    from models.simulator import simulate_pca

    settings = {"rounds": args.rounds, "fraction": args.fraction, "trim": args.trim, "trim_by": args.trim_by,
                **overrides}
    bar = progress(1 if algorithm in ("centralized", "local") else settings["rounds"], algorithm)

    def on_round(entry: dict[str, float]) -> None:
        if bar is not None:
            bar.update(1)
            bar.set_postfix(sd=f"{entry.get('subspace_distance', float('nan')):.3f}")

    try:
        result = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, algorithm, args.rank,
                              settings["rounds"], settings["fraction"], args.quantile, args.seed, settings["trim"],
                              {**algorithm_params(args), **(params or {})}, on_round, settings["trim_by"])
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        if bar is not None:
            bar.close()
    result.update(dataset=data.name, clients=len(parts), fraction=settings["fraction"], partition=args.partition,
                  seed=args.seed, quantile=args.quantile, trim=settings["trim"], trim_by=settings["trim_by"],
                  contamination=args.contamination,
                  n_features=len(data.feature_names), n_train=len(split.X_train), n_test=len(split.X_test),
                  attack_share_test=float(split.y_test.mean()))
    return result


def run_simulate(args: argparse.Namespace) -> int:
    data, split, parts = prepare(args)
    result = simulate(args, args.algorithm, data, split, parts)
    log.info("%s on %s: auc_roc=%.4f average_precision=%.4f f1=%.3f subspace_distance=%.4f "
             "seconds_per_round=%.5f", result["algorithm"], result["dataset"], result["auc_roc"],
             result["average_precision"], result["f1"], result["subspace_distance"], result["seconds_per_round"])
    write_json(result, args.json)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from fedsentry.bench_pca import bench

    data, split, parts = prepare(args)
    write_json(bench(args, data, split, parts), args.json)
    return 0
