"""A federated PCA run in one process from command-line settings: load, split, partition, simulate.

Used by `fedsentry simulate pca`, `bench pca` and the demo (which compares its MQTT run with it)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from fedsentry.data import datasets
from fedsentry.errors import UsageError
from fedsentry.output import progress
from fedsentry.runs.params import flag_params, simulated_params
from models.detection.attacks import ROGUE_DATA, Adversaries, not_applicable
from models.families import family
from models.mixture.rogues import compliant_rogues
from models.mixture.spec import MixtureJobSpec
from models.partition import partition
from models.pca import FEDERATED
from models.pca.spec import PCAJobSpec


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


def mixture_simulation(args: argparse.Namespace, algorithm: str, data, split, parts,
                       params: dict[str, Any] | None = None, strict: bool = True, keep: bool = False,
                       **overrides: Any) -> dict[str, Any]:
    """`simulate` for the Gaussian-mixture detector (models.mixture.simulator)."""
    from models.mixture import ALGORITHMS as MIXTURE
    from models.mixture import FEDERATED as MIXTURE_FEDERATED
    from models.mixture.anchors import ANCHORS
    from models.mixture.fedem import FedEM
    from models.mixture.simulator import devices_seeing, select_mixture, simulate_mixture

    if algorithm not in (*MIXTURE, *ANCHORS):  # anchors: bench robustness only
        raise UsageError(f"--algorithm {algorithm} is not a gmm algorithm (choose from {', '.join(MIXTURE)})")
    if args.trim:
        raise UsageError("--trim applies to the pca detector only")
    if getattr(args, "min_support", None) is not None and algorithm != "fedem":
        raise UsageError(f"--min-support is FedEM's support rule: --algorithm {algorithm} has no devices to count")
    rounds, fraction = overrides.get("rounds", args.rounds), overrides.get("fraction", args.fraction)
    quantile = args.quantile or MixtureJobSpec.quantile
    cls = {**MIXTURE_FEDERATED, **ANCHORS}.get(algorithm, FedEM)
    chosen = flag_params(cls, {**algorithm_params(args), **(params or {})}, algorithm, strict,
                         problem={"n_features": len(data.feature_names)})
    bar = progress(1 if algorithm == "centralized" else rounds + 1, f"gmm {algorithm}")

    def on_round(entry: dict[str, float]) -> None:
        if bar is not None:
            bar.update(1)

    select = getattr(args, "select", False)
    if select and ("reg" in chosen or algorithm != "fedem"):
        raise UsageError("--select chooses the ridge of fedem itself: leave out --reg (and --algorithm centralized)")
    try:
        if select:
            result = select_mixture(parts, split.X_test, split.y_test, data.feature_names, params=chosen,
                                    algorithm=algorithm, rounds=rounds, fraction=fraction, quantile=quantile,
                                    seed=args.seed, holdout=args.holdout)
        else:
            result = simulate_mixture(parts, split.X_test, split.y_test, data.feature_names, algorithm, rounds,
                                      fraction, quantile, args.seed, chosen, args.holdout, on_round,
                                      test_devices=devices_seeing(parts, split.X_test, split.y_test, args.seed,
                                                                  first_honest=getattr(args, "adversaries", 0)),
                                      adversaries=adversaries(args, algorithm, algorithm_class(args.detector,
                                                                                                algorithm)))
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        if bar is not None:
            bar.close()
    model = result.pop("detector")
    if keep:  # the trained detector itself (bench measures its scoring)
        result["model"] = model
    result.update(detector=MixtureJobSpec.family, dataset=data.name, clients=len(parts), fraction=fraction,
                  partition=args.partition,
                  seed=args.seed, quantile=quantile, holdout=args.holdout, contamination=args.contamination,
                  adversaries=getattr(args, "adversaries", 0), attack=getattr(args, "attack", None),
                  subspace_distance=None, n_features=len(data.feature_names), n_train=len(split.X_train),
                  n_test=len(split.X_test), attack_share_test=float(split.y_test.mean()))
    return result


def pca_problem(args: argparse.Namespace, data) -> dict[str, int]:
    """The dimensions a PCA algorithm of this run is built with (the lifted features with a kernel)."""
    lifted = getattr(args, "kernel", "none") == "rff"
    return {"n_features": args.kernel_features if lifted else len(data.feature_names), "rank": args.rank}


def kernel_settings(args: argparse.Namespace) -> dict[str, Any]:
    """simulate_pca's kernel arguments from the --kernel flags (absent on commands without them)."""
    return {"kernel": getattr(args, "kernel", "none"), "kernel_features": getattr(args, "kernel_features", 1000),
            "kernel_gamma": getattr(args, "kernel_gamma", None)}


def simulate(args: argparse.Namespace, algorithm: str, data, split, parts, params: dict[str, Any] | None = None,
             strict: bool = True, **overrides: Any) -> dict[str, Any]:
    """Run one algorithm of the --detector family with the command's settings; overrides replace settings (rounds,
    fraction, trim), params replace algorithm parameters."""
    return SIMULATORS[args.detector](args, algorithm, data, split, parts, params, strict, **overrides)


def pca_simulation(args: argparse.Namespace, algorithm: str, data, split, parts,
                   params: dict[str, Any] | None = None, strict: bool = True, **overrides: Any) -> dict[str, Any]:
    """`simulate` for the PCA detector (models.pca.simulator)."""
    from models.pca.simulator import simulate_pca

    chosen = flag_params(FEDERATED.get(algorithm), {**algorithm_params(args), **(params or {})}, algorithm, strict,
                         problem=pca_problem(args, data))
    settings = {"rounds": args.rounds, "fraction": args.fraction, "trim": args.trim, "trim_by": args.trim_by,
                **overrides}
    bar = progress(1 if algorithm in ("centralized", "local") else settings["rounds"], algorithm)

    def on_round(entry: dict[str, float]) -> None:
        if bar is not None:
            bar.update(1)
            bar.set_postfix(sd=f"{entry.get('subspace_distance', float('nan')):.3f}")

    try:
        result = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, algorithm, args.rank,
                              settings["rounds"], settings["fraction"], args.quantile or PCAJobSpec.quantile,
                              args.seed, settings["trim"], chosen, on_round, settings["trim_by"],
                              **kernel_settings(args),
                              adversaries=adversaries(args, algorithm, FEDERATED.get(algorithm)))
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        if bar is not None:
            bar.close()
    result.update(dataset=data.name, clients=len(parts), fraction=settings["fraction"], partition=args.partition,
                  seed=args.seed, quantile=args.quantile or PCAJobSpec.quantile, trim=settings["trim"],
                  trim_by=settings["trim_by"],
                  contamination=args.contamination, adversaries=getattr(args, "adversaries", 0),
                  attack=getattr(args, "attack", None),
                  n_features=len(data.feature_names), n_train=len(split.X_train), n_test=len(split.X_test),
                  attack_share_test=float(split.y_test.mean()))
    return result


#: the detector families this module runs, each through its own simulator (models.pca.simulator,
#: models.mixture.simulator): the names are their specs'
SIMULATORS = {PCAJobSpec.family: pca_simulation, MixtureJobSpec.family: mixture_simulation}
