"""Poisoned uploads, for measuring what the robust aggregators withstand (simulation and tests).

Each attack turns the honest upload of a client into a malicious one of the same shape:
``random`` (noise of the honest upload's size), ``scaled`` (the honest upload times 1000) and
``rotated`` (the honest upload's size, but spanning only directions orthogonal to the current
consensus, to steer it away from the principal subspace).
"""

from __future__ import annotations

import numpy as np

from models.federated import State
from models.linalg import orth

ATTACKS = ("random", "scaled", "rotated")


def poison(uploads: State, broadcast: State, kind: str, rng: np.random.Generator) -> State:
    out = {}
    basis = orth(next(iter(broadcast.values())))
    for name, X in uploads.items():
        norms = np.linalg.norm(X, axis=(-2, -1), keepdims=True)
        if kind == "random":
            N = rng.standard_normal(X.shape)
            out[name] = N / np.linalg.norm(N, axis=(-2, -1), keepdims=True) * norms
        elif kind == "scaled":
            out[name] = 1000.0 * X
        elif kind == "rotated":
            away = X - basis @ (np.swapaxes(basis, -1, -2) @ X)
            away += 1e-9 * rng.standard_normal(X.shape)
            out[name] = away / np.linalg.norm(away, axis=(-2, -1), keepdims=True) * norms
        else:
            raise ValueError(f"unknown attack {kind!r}; choose from {', '.join(ATTACKS)}")
    return out
