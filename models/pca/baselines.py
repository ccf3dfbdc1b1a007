"""The two reference points of every federated PCA algorithm.

centralised PCA on the pooled second moment is the exact quality limit; local ("self-learning") PCA,
each client on its own data, is the paper's weak baseline.
"""

from __future__ import annotations

import numpy as np

from models.core.linalg import top_eigvecs


def centralized_pca(C: np.ndarray, weight: np.ndarray, rank: int) -> np.ndarray:
    """Top-k eigenvectors of the pooled, sample-weighted second moment sum_i w_i C_i."""
    pooled = np.einsum("b,bij->ij", np.asarray(weight, float), C) / np.sum(weight)
    return top_eigvecs(pooled, rank)[1]


def local_pca(C: np.ndarray, rank: int) -> np.ndarray:
    """Each client's own top-k eigenvectors, (b, d, k)."""
    _w, V = np.linalg.eigh((C + np.swapaxes(C, -1, -2)) / 2)
    return V[..., ::-1][..., :rank]
