"""The local PCA objective on second moments: f(U) = tr(C) - 2 tr(U'CU) + tr(U'CU U'U).

This equals ||(I - U U') X||_F^2 / n for C = X X' / n, so a local step costs O(d^2 k) however many
records the client holds. All functions are batched over a leading client axis.
"""

from __future__ import annotations

import numpy as np


def _t(A: np.ndarray) -> np.ndarray:
    return np.swapaxes(A, -1, -2)


def reconstruction_objective(C: np.ndarray, U: np.ndarray) -> np.ndarray:
    """f(U) per client: mean squared reconstruction error of the client's records."""
    CU = C @ U
    UtCU = _t(U) @ CU
    UtU = _t(U) @ U
    tr_C = np.trace(C, axis1=-2, axis2=-1)
    return tr_C - 2 * np.trace(UtCU, axis1=-2, axis2=-1) + np.einsum("...ij,...ji->...", UtCU, UtU)


def reconstruction_gradient(C: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Euclidean gradient of f: -4 C U + 2 (U U'CU + C U U'U)."""
    CU = C @ U
    return -4 * CU + 2 * (U @ (_t(U) @ CU) + CU @ (_t(U) @ U))
