"""Federated PCA algorithms and their registry."""

from __future__ import annotations

from typing import Any

from models.core.federated import make
from models.pca.base import PCAAlgorithm
from models.pca.fedmm import FedMM
from models.pca.fedpe import FedPE
from models.pca.fedpg import FedPG

FEDERATED = {"fedpe": FedPE, "fedpg": FedPG, "fedmm": FedMM}
BASELINES = ("centralized", "local")
ALGORITHMS = (*BASELINES, *FEDERATED)


def make_algorithm(name: str, n_features: int, rank: int, **params: Any) -> PCAAlgorithm:
    """Instantiate a federated PCA algorithm by name, ignoring parameters it does not take."""
    return make(FEDERATED, name, ALGORITHMS, **{**params, "n_features": n_features, "rank": rank})


__all__ = ["ALGORITHMS", "BASELINES", "FEDERATED", "FedMM", "FedPE", "FedPG", "PCAAlgorithm", "make_algorithm"]
