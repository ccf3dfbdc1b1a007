"""Federated transport maps (seed 003, Sec. 7): one map, shared by the fleet, from its pooled traffic onto a
target Q every party can sample, learnt as the gradient of an input-convex network (icnn) by FedMM-OT (fedmm)."""

from __future__ import annotations

from models.otmap.fedmm import ALGORITHMS as FEDERATED

__all__ = ["FEDERATED"]
