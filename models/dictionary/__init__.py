"""Federated dictionary learning (seed 003 Sec. 6: FedMM on the lasso codes' statistics) and its registry."""

from __future__ import annotations

from models.dictionary.fedmm import FedMMDictionary

FEDERATED = {"fedmm-dl": FedMMDictionary}
BASELINES = ("centralized",)
ALGORITHMS = (*BASELINES, *FEDERATED)

__all__ = ["ALGORITHMS", "BASELINES", "FEDERATED", "FedMMDictionary"]
