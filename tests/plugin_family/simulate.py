"""The plug-in family's in-process simulation (its registry line's `simulator`): the one round loop
(models.core.rounds.simulate) with the in-process transport, as `fedsentry simulate` calls a detector's."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from models.core.rounds import BatchedPool, Rounds, simulate
from tests.plugin_family.model import FedMean


def simulation(args: argparse.Namespace, algorithm: str, data: Any, split: Any, parts: list[np.ndarray],
               params: dict[str, Any] | None = None, strict: bool = True, **overrides: Any) -> dict[str, Any]:
    """The fleet's mean of the devices' records (as many each) after `rounds` rounds sampling `fraction` of
    them."""
    alg = FedMean(parts[0].shape[1], **(params or {}))
    loop = Rounds.start(alg, len(parts), overrides.get("fraction", args.fraction), np.random.default_rng(args.seed))
    pool = BatchedPool.of(alg, {"X": np.stack(parts)}, loop.broadcast)  # devices of equal size: one batch
    simulate(loop, pool, np.ones(len(parts)), overrides.get("rounds", args.rounds))
    return {"algorithm": algorithm, "mean": loop.broadcast["mean"].tolist()}
