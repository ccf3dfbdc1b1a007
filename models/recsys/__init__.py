"""Federated recommendation (matrix completion) algorithms and their registry."""

from __future__ import annotations

from models.recsys.altgdmin import AltGDMin
from models.recsys.base import RecsysAlgorithm
from models.recsys.fedmavg import FedMAvg
from models.recsys.fedmc_admm import FedMCADMM

FEDERATED: dict[str, type[RecsysAlgorithm]] = {"fedmc-admm": FedMCADMM, "fedmavg": FedMAvg, "altgdmin": AltGDMin}
BASELINES = ("centralized",)
ALGORITHMS = (*FEDERATED, *BASELINES)


def make_algorithm(name: str, n_items: int, rank: int, **params) -> RecsysAlgorithm:
    """Instantiate a federated recommendation algorithm by name, ignoring parameters it does not take."""
    try:
        cls = FEDERATED[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(ALGORITHMS)}") from None
    code = cls.__init__.__code__
    accepted = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]  # parameters, not local names
    return cls(n_items=n_items, rank=rank, **{k: v for k, v in params.items() if k in accepted and v is not None})


__all__ = ["ALGORITHMS", "BASELINES", "FEDERATED", "AltGDMin", "FedMAvg", "FedMCADMM", "RecsysAlgorithm",
           "make_algorithm"]
