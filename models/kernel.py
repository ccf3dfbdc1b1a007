"""Random Fourier features: an explicit feature map whose inner products approximate the Gaussian kernel,
so that the linear federated PCA algorithms (FedPE, FedPG, FedMM) fit a kernel PCA unchanged.

    z(x) = sqrt(2 / D) cos(x W + b),   W ~ N(0, 2 gamma I) (d x D),   b ~ U[0, 2 pi) (D,)

gives E[z(x)'z(y)] = exp(-gamma ||x - y||^2) (Rahimi and Recht, 2007). x is the model's standardised
record (signed log1p, then the federation's z-score). The lifted features are *not* standardised again:
PCA runs on their uncentred second moment (the mean direction is captured by a component), so no second
statistics phase is needed.

The map travels as four numbers, (n_features, n_components, gamma, seed), never as W: every device and
the coordinator regenerate W and b from them. They are drawn from the raw 64-bit stream of PCG64 with
fixed transforms (Box-Muller), not from `Generator.standard_normal`, whose streams numpy does not promise
to keep across versions: an agent with another numpy draws the same map.

Every z_j^2 <= 2 / D, so an honest device's lifted second moment C_i has diag(C_i) <= 2 / D and
tr(C_i) <= 2 (`diag_bound`, `trace_bound`): what FedMM checks uploads against when the statistics phase
cannot know the lifted diagonal.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

KERNELS = ("none", "rff")
MIN_COMPONENTS, MAX_COMPONENTS = 16, 4096
DEFAULT_COMPONENTS = 1000


def default_gamma(n_features: int) -> float:
    """The median heuristic (gamma = 1 / typical squared distance) on z-scored records, from the global
    statistics alone: two records of d unit-variance features are 2d apart in squared distance on average,
    so gamma = 1 / (2d). Label-free."""
    return 1.0 / (2 * n_features)


def _uniform(bits: np.random.PCG64, n: int) -> np.ndarray:
    """n uniforms in (0, 1] from the top 53 bits of the raw stream."""
    raw = bits.random_raw(n)
    return ((raw >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53


class RandomFourierFeatures:
    """The seeded map z(x) from d standardised features to D = n_components lifted ones."""

    def __init__(self, n_features: int, n_components: int = DEFAULT_COMPONENTS, gamma: float | None = None,
                 seed: int = 0):
        if n_features < 1:
            raise ValueError(f"n_features must be at least 1, got {n_features}")
        if not MIN_COMPONENTS <= n_components <= MAX_COMPONENTS:
            raise ValueError(f"n_components must be between {MIN_COMPONENTS} and {MAX_COMPONENTS}, got {n_components}")
        gamma = default_gamma(n_features) if gamma is None else float(gamma)
        if not (math.isfinite(gamma) and gamma > 0):
            raise ValueError(f"gamma must be a positive number, got {gamma}")
        self.n_features, self.n_components, self.gamma, self.seed = int(n_features), int(n_components), gamma, int(seed)
        bits = np.random.PCG64(self.seed)
        d, D = self.n_features, self.n_components
        half = (d * D + 1) // 2
        r, theta = np.sqrt(-2.0 * np.log(_uniform(bits, half))), 2.0 * np.pi * _uniform(bits, half)
        normal = np.concatenate([r * np.cos(theta), r * np.sin(theta)])[: d * D]
        self.weights_ = normal.reshape(d, D) * math.sqrt(2.0 * gamma)
        self.offset_ = 2.0 * np.pi * (1.0 - _uniform(bits, D))  # [0, 2 pi)
        self.scale_ = math.sqrt(2.0 / D)
        self._w32, self._b32 = self.weights_.astype(np.float32), self.offset_.astype(np.float32)

    @property
    def diag_bound(self) -> float:
        return 2.0 / self.n_components

    @property
    def trace_bound(self) -> float:
        return 2.0

    def phase(self, X: np.ndarray) -> np.ndarray:
        """u = x W + b (float64)."""
        return np.asarray(X, dtype=float) @ self.weights_ + self.offset_

    def transform(self, X: np.ndarray) -> np.ndarray:
        """z(x) in float64: what training (second moments, threshold errors) uses, on both sides alike."""
        U = self.phase(X)
        np.cos(U, out=U)
        U *= self.scale_
        return U

    def transform32(self, X: np.ndarray) -> np.ndarray:
        """z(x) in float32, for scoring: about twice the throughput; the scores differ from float64 by about
        1e-6 of ||z||^2 (~1), far below any threshold."""
        U = np.asarray(X, dtype=np.float32) @ self._w32
        U += self._b32
        np.cos(U, out=U)
        U *= np.float32(self.scale_)
        return U

    def params(self) -> dict[str, Any]:
        """The four numbers the map is regenerated from (model and round meta)."""
        return {"n_features": self.n_features, "n_components": self.n_components, "gamma": self.gamma,
                "seed": self.seed}

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> RandomFourierFeatures:
        """The map of these four numbers (drawn once per process: an agent asks for it every round)."""
        return _drawn(int(params["n_features"]), int(params["n_components"]), float(params["gamma"]),
                      int(params["seed"]))


@lru_cache(maxsize=4)
def _drawn(d: int, D: int, gamma: float, seed: int) -> RandomFourierFeatures:
    return RandomFourierFeatures(d, D, gamma, seed)
