"""`simulate` for the Gaussian-mixture detector from command-line settings (models.mixture.simulator): the gmm
family's `simulator` in the registry (models.families)."""

from __future__ import annotations

import argparse
from typing import Any

from fedsentry.errors import UsageError
from fedsentry.output import progress
from fedsentry.runs.detection import (
    adversaries,
    algorithm_class,
    algorithm_params,
    dp_budget,
    simulating,
)
from fedsentry.runs.params import flag_params, private_settings
from models.mixture.spec import MixtureJobSpec


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
    private, dropout = private_settings(args)
    if private and (select or algorithm != "fedem"):
        raise UsageError("--private trains fedem by secure sums: leave out --select and --algorithm other than fedem")
    dp = dp_budget(args)
    if dp is not None and (select or algorithm != "fedem"):
        raise UsageError("--dp-epsilon trains fedem on noisy sums: leave out --select and --algorithm other than "
                         "fedem")
    with simulating(bar):
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
                                                                                                algorithm)),
                                      private=private, dropout=dropout, dp=dp,
                                      clear=getattr(args, "private_clear", False),
                                      support_proofs=getattr(args, "support_proofs", False))
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
