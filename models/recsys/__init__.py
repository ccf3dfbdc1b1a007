"""Federated recommendation (matrix completion) algorithms and their registry."""

from __future__ import annotations

from typing import Any

from models.core.federated import make
from models.recsys.altgdmin import AltGDMin
from models.recsys.base import RecsysAlgorithm
from models.recsys.fedmavg import FedMAvg
from models.recsys.fedmc_admm import FedMCADMM

FEDERATED: dict[str, type[RecsysAlgorithm]] = {"fedmc-admm": FedMCADMM, "fedmavg": FedMAvg, "altgdmin": AltGDMin}
BASELINES = ("centralized",)
ALGORITHMS = (*FEDERATED, *BASELINES)


def make_algorithm(name: str, n_items: int, rank: int, **params: Any) -> RecsysAlgorithm:
    """Instantiate a federated recommendation algorithm by name, ignoring parameters it does not take."""
    return make(FEDERATED, name, ALGORITHMS, **{**params, "n_items": n_items, "rank": rank})


__all__ = ["ALGORITHMS", "BASELINES", "FEDERATED", "AltGDMin", "FedMAvg", "FedMCADMM", "RecsysAlgorithm",
           "make_algorithm"]
