"""Small linear-algebra helpers shared by the algorithms (batched where it pays)."""

from __future__ import annotations

import numpy as np


def orth(A: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the columns of A (batched over leading axes), signs made deterministic."""
    Q, R = np.linalg.qr(A)
    signs = np.sign(np.diagonal(R, axis1=-2, axis2=-1)).copy()
    signs[signs == 0] = 1.0
    return Q * signs[..., None, :]


def top_eigvecs(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenpairs of a symmetric matrix, largest first."""
    w, V = np.linalg.eigh((M + M.T) / 2)
    order = np.argsort(w)[::-1][:k]
    return w[order], V[:, order]


def subspace_distance(Z: np.ndarray, U_star: np.ndarray) -> float:
    """SD(Z) = ||(I - U* U*^T) orth(Z)||_F: 0 for the same subspace, sqrt(k) for orthogonal ones."""
    Q = orth(np.asarray(Z, dtype=float))
    U = orth(np.asarray(U_star, dtype=float))
    R = Q - U @ (U.T @ Q)
    return float(np.linalg.norm(R))


def procrustes_align(U: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Rotate U (batched, ... x d x k) to best match Z: U R with R = argmin ||U R - Z||, R orthogonal."""
    M = np.swapaxes(U, -1, -2) @ Z
    A, _, Bt = np.linalg.svd(M)
    return U @ (A @ Bt)


def cholesky_qr(A: np.ndarray) -> np.ndarray:
    """The Q factor of A (batched) through the Cholesky factor of A'A: half the cost of a Householder QR
    and just as accurate when A is well conditioned (as U - eta G is for U orthonormal and G tangent)."""
    L = np.linalg.cholesky(np.swapaxes(A, -1, -2) @ A)
    return A @ np.swapaxes(np.linalg.inv(L), -1, -2)
