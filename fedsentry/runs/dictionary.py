"""`simulate` for the dictionary detector from command-line settings (models.dictionary.simulator): the dict
family's `simulator` in the registry (models.families)."""

from __future__ import annotations

import argparse
from typing import Any

from fedsentry.errors import UsageError
from fedsentry.output import progress
from fedsentry.runs.detection import algorithm_params, simulating
from fedsentry.runs.params import flag_params
from models.dictionary import ALGORITHMS, FEDERATED
from models.dictionary.spec import DictionaryJobSpec


def dictionary_simulation(args: argparse.Namespace, algorithm: str, data, split, parts,
                          params: dict[str, Any] | None = None, strict: bool = True, keep: bool = False,
                          **overrides: Any) -> dict[str, Any]:
    """`simulate` for the dictionary detector (models.dictionary.simulator)."""
    from models.dictionary.simulator import simulate_dictionary

    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm {algorithm} is not a dict algorithm (choose from {', '.join(ALGORITHMS)})")
    for flag, given in (("--trim", args.trim), ("--adversaries", getattr(args, "adversaries", 0)),
                        ("--private", getattr(args, "private", False))):
        if given:
            raise UsageError(f"{flag} is not available with --detector dict yet")
    rounds, fraction = overrides.get("rounds", args.rounds), overrides.get("fraction", args.fraction)
    quantile = args.quantile or DictionaryJobSpec.quantile
    chosen = flag_params(FEDERATED["fedmm-dl"], {**algorithm_params(args), **(params or {})}, algorithm, strict,
                         problem={"n_features": len(data.feature_names)})
    bar = progress(rounds, f"dict {algorithm}")

    def on_round(entry: dict[str, float]) -> None:
        if bar is not None:
            bar.update(1)

    with simulating(bar):
        result = simulate_dictionary(parts, split.X_test, split.y_test, data.feature_names, algorithm, rounds,
                                     fraction, quantile, args.seed, chosen, on_round)
    model = result.pop("detector")
    if keep:
        result["model"] = model
    result.update(detector=DictionaryJobSpec.family, dataset=data.name, clients=len(parts), fraction=fraction,
                  partition=args.partition, seed=args.seed, quantile=quantile, contamination=args.contamination,
                  subspace_distance=None, n_features=len(data.feature_names), n_train=len(split.X_train),
                  n_test=len(split.X_test), attack_share_test=float(split.y_test.mean()))
    return result
