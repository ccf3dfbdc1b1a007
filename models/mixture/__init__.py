"""Federated Gaussian mixtures (FedMM on the E-step's statistics) and their registry."""

from __future__ import annotations

from models.mixture.fedem import FedEM

FEDERATED = {"fedem": FedEM}
BASELINES = ("centralized",)
ALGORITHMS = (*BASELINES, *FEDERATED)

__all__ = ["ALGORITHMS", "BASELINES", "FEDERATED", "FedEM"]
