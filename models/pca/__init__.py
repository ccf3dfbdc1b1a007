"""Federated PCA algorithms and their registry."""

from __future__ import annotations

from models.pca.base import PCAAlgorithm
from models.pca.fedmm import FedMM
from models.pca.fedpe import FedPE
from models.pca.fedpg import FedPG

FEDERATED = {"fedpe": FedPE, "fedpg": FedPG, "fedmm": FedMM}
BASELINES = ("centralized", "local")
ALGORITHMS = (*BASELINES, *FEDERATED)


def make_algorithm(name: str, n_features: int, rank: int, **params) -> PCAAlgorithm:
    """Instantiate a federated PCA algorithm by name, ignoring parameters it does not take."""
    try:
        cls = FEDERATED[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(ALGORITHMS)}") from None
    accepted = cls.__init__.__code__.co_varnames
    return cls(n_features=n_features, rank=rank, **{k: v for k, v in params.items() if k in accepted and v is not None})


__all__ = ["ALGORITHMS", "BASELINES", "FEDERATED", "FedMM", "FedPE", "FedPG", "PCAAlgorithm", "make_algorithm"]
