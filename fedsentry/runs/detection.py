"""A federated anomaly-detection run in one process from command-line settings: load, split, partition, then the
detector family's own simulation (its registry entry's `simulator`: fedsentry.runs.mixture, fedsentry.runs.pca).

Used by `fedsentry simulate pca`, `bench pca`, `bench detection`, `bench robustness` and the demo (which compares
its MQTT run with it)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from fedsentry.data import datasets
from fedsentry.errors import UsageError
from fedsentry.runs.params import simulated_params
from models.detection.attacks import ROGUE_DATA, Adversaries, not_applicable
from models.families import family
from models.mixture.rogues import compliant_rogues
from models.partition import partition


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
    if getattr(args, "kernel", "none") == "rff":
        if args.rank >= args.kernel_features:
            raise UsageError(f"--rank {args.rank} must be smaller than --kernel-features ({args.kernel_features})")
    elif args.rank >= d:
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
    parts = [split.X_train[i] for i in idx]
    adv = fleet_adversaries(args)
    if adv.count and adv.attack in ROGUE_DATA:
        parts = compliant_rogues(parts, split.X_test[split.y_test == 1], args.adversaries, seed=args.seed)
    return data, split, parts


def fleet_adversaries(args: argparse.Namespace) -> Adversaries:
    """The first --adversaries K devices and their --attack (compliant when K is given alone)."""
    k, attack = getattr(args, "adversaries", 0), getattr(args, "attack", None)
    if not k:
        if attack:
            raise UsageError(f"--attack {attack} needs --adversaries K (how many devices attack)")
        return Adversaries()
    if not 0 < k < args.clients:
        raise UsageError(f"--adversaries {k}: must be between 1 and --clients - 1 ({args.clients - 1})")
    args.attack = attack or "compliant"
    return Adversaries(k, args.attack, args.seed)


def adversaries(args: argparse.Namespace, algorithm: str, cls: type | None) -> Adversaries:
    """`fleet_adversaries`, checked against the algorithm (its class, None for a baseline): an attack that means
    nothing for it is refused saying why."""
    adv = fleet_adversaries(args)
    why = adv.count and not_applicable(adv.attack, algorithm, cls)
    if why:
        raise UsageError(f"--attack {adv.attack} with --detector {args.detector}: {why}")
    return adv


def algorithm_class(detector: str, algorithm: str) -> type | None:
    """The class of a detector's federated algorithm, or of an anchor of `bench robustness` (None: a baseline)."""
    from models.mixture.anchors import ANCHORS

    return {**family(detector).algorithms, **ANCHORS}.get(algorithm)


def algorithm_params(args: argparse.Namespace) -> dict[str, Any]:
    """The parameters of the detector's algorithms given by their flags (None: not given)."""
    return simulated_params(args, args.detector)








def simulate(args: argparse.Namespace, algorithm: str, data, split, parts, params: dict[str, Any] | None = None,
             strict: bool = True, **overrides: Any) -> dict[str, Any]:
    """Run one algorithm of the --detector family with the command's settings; overrides replace settings (rounds,
    fraction, trim), params replace algorithm parameters."""
    run = family(args.detector).load_simulator()
    result: dict[str, Any] = run(args, algorithm, data, split, parts, params, strict, **overrides)
    return result


def dp_budget(args: argparse.Namespace) -> Any:
    """--dp-epsilon and --dp-delta, checked: the privacy budget (a models.private.accounting.Budget), or None."""
    epsilon, delta = getattr(args, "dp_epsilon", None), getattr(args, "dp_delta", None)
    if epsilon is None:
        if delta is not None and delta != 1e-5:
            raise UsageError("--dp-delta is differential privacy's: add --dp-epsilon")
        return None
    try:
        import dp_accounting  # noqa: F401  (the `private` extra)
    except ImportError:
        raise UsageError("--dp-epsilon needs the private extra: pip install 'fedsentry[private]'") from None
    from models.private.accounting import Budget

    try:
        return Budget(float(epsilon), 1e-5 if delta is None else float(delta))
    except ValueError as e:
        raise UsageError(str(e).replace("dp_epsilon", "--dp-epsilon").replace("dp_delta", "--dp-delta")) from None


@contextmanager
def simulating(bar: Any) -> Iterator[None]:
    """A simulation's run: a ValueError of its settings is the command's usage error, and its progress bar (None:
    none) is closed however it ends."""
    try:
        yield
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        if bar is not None:
            bar.close()
