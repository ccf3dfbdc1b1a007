"""`simulate` for the PCA detector from command-line settings (models.pca.simulator): the pca family's
`simulator` in the registry (models.families)."""

from __future__ import annotations

import argparse
from typing import Any

from fedsentry.output import progress
from fedsentry.runs.detection import adversaries, algorithm_params, dp_budget, simulating
from fedsentry.runs.params import flag_params, private_settings
from models.pca import FEDERATED
from models.pca.spec import PCAJobSpec


def pca_problem(args: argparse.Namespace, data) -> dict[str, int]:
    """The dimensions a PCA algorithm of this run is built with (the lifted features with a kernel)."""
    lifted = getattr(args, "kernel", "none") == "rff"
    return {"n_features": args.kernel_features if lifted else len(data.feature_names), "rank": args.rank}
def kernel_settings(args: argparse.Namespace) -> dict[str, Any]:
    """simulate_pca's kernel arguments from the --kernel flags (absent on commands without them)."""
    return {"kernel": getattr(args, "kernel", "none"), "kernel_features": getattr(args, "kernel_features", 1000),
            "kernel_gamma": getattr(args, "kernel_gamma", None)}
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

    private, dropout = private_settings(args)
    with simulating(bar):
        result = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, algorithm, args.rank,
                              settings["rounds"], settings["fraction"], args.quantile or PCAJobSpec.quantile,
                              args.seed, settings["trim"], chosen, on_round, settings["trim_by"],
                              **kernel_settings(args),
                              adversaries=adversaries(args, algorithm, FEDERATED.get(algorithm)),
                              private=private, dropout=dropout, dp=dp_budget(args))
    result.update(dataset=data.name, clients=len(parts), fraction=settings["fraction"], partition=args.partition,
                  seed=args.seed, quantile=args.quantile or PCAJobSpec.quantile, trim=settings["trim"],
                  trim_by=settings["trim_by"],
                  contamination=args.contamination, adversaries=getattr(args, "adversaries", 0),
                  attack=getattr(args, "attack", None),
                  n_features=len(data.feature_names), n_train=len(split.X_train), n_test=len(split.X_test),
                  attack_share_test=float(split.y_test.mean()))
    return result
