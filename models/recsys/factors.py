"""The biased factor model and the small solvers every recommendation algorithm shares.

Prediction for user t and item j (ratings centred on the global mean mu):

    r_tj ~ mu + u_t . v_j + b_t + c_j

Factors are *packed* with their bias in the last column: a user's row is P_t = [u_t, b_t] and an item's
row is Q_j = [v_j, c_j] (length rank + 1). Seen from the user side the prediction is linear in P_t with
design row [v_j, 1] and offset c_j; seen from the item side it is linear in Q_j with design row
[u_t, 1] and offset b_t. So one ridge solver serves users and items, and the paper's closed forms apply
unchanged to the packed rows (the biases are what the paper's plain U V model lacks).
"""

from __future__ import annotations

import numpy as np

from models.core.consensus import soft_threshold  # the proximal map of tau |.|_1 (seed 000, eq. 72)


def design(F: np.ndarray) -> np.ndarray:
    """[factors, 1]: the packed rows with the bias column replaced by ones (the partner's design rows)."""
    D = F.copy()
    D[..., -1] = 1.0
    return D


def predict_pairs(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Centred predictions u.v + b + c for aligned rows of packed user (P) and item (Q) factors."""
    return np.einsum("...i,...i->...", P[..., :-1], Q[..., :-1]) + P[..., -1] + Q[..., -1]


def grouped_grams(X: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """sum_{rows in group g} x x' for consecutive groups X[ptr[g]:ptr[g+1]] (empty groups give zeros)."""
    G = np.zeros((len(ptr) - 1, X.shape[1], X.shape[1]))
    for g in np.flatnonzero(np.diff(ptr)):
        block = X[ptr[g]:ptr[g + 1]]
        G[g] = block.T @ block
    return G


def grouped_sums(X: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """sum of the rows of X in each consecutive group (zeros for empty groups)."""
    out = np.zeros((len(ptr) - 1, *X.shape[1:]))
    nz = np.flatnonzero(np.diff(ptr))
    if len(nz):
        out[nz] = np.add.reduceat(X, ptr[nz], axis=0)
    return out


def normal_equations(partner: np.ndarray, target: np.ndarray, ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gram and right-hand side of each group's least squares in its packed row (users or items).

    `partner` holds, for every rating (sorted by group), the packed row of the other side; its design row
    is that row with the bias replaced by 1, and the partner's bias moves to the target."""
    D = design(partner)
    return grouped_grams(D, ptr), grouped_sums(D * (target - partner[:, -1])[:, None], ptr)


def ridge_solve(gram: np.ndarray, rhs: np.ndarray, lam: float | np.ndarray) -> np.ndarray:
    """argmin_x 1/2 x'Gx - x'rhs + lam/2 |x|^2 for a batch of small systems, (G + lam I)^-1 rhs."""
    k = gram.shape[-1]
    lam = np.asarray(lam, dtype=float)
    A = gram + lam[..., None, None] * np.eye(k) if lam.ndim else gram + lam * np.eye(k)
    return np.linalg.solve(A, rhs[..., None])[..., 0]


def prox_step(X: np.ndarray, grad: np.ndarray, L: np.ndarray, lam: float, regularizer: str = "l2") -> np.ndarray:
    """One linearised proximal step on rows of X with per-row curvature L (paper eq. 66 for l2, 71 for l1).

    l2: argmin_Z <grad, Z> + L/2 |Z - X|^2 + lam/2 |Z|^2 = (L X - grad) / (L + lam)
    l1: argmin_Z <grad, Z> + L/2 |Z - X|^2 + lam |Z|_1   = S(X - grad / L, lam / L)"""
    L = L[..., None]
    if regularizer == "l2":
        return (L * X - grad) / (L + lam)
    if regularizer == "l1":
        return soft_threshold(X - grad / L, lam / L)
    raise ValueError(f"unknown regularizer {regularizer!r}; choose l2 or l1")


def regularizer_value(X: np.ndarray, lam: float, regularizer: str = "l2") -> float:
    """lam/2 |X|_F^2 (l2) or lam |X|_1 (l1)."""
    if regularizer == "l2":
        return 0.5 * lam * float(np.sum(X * X))
    return lam * float(np.sum(np.abs(X)))


def largest_eigenvalue(G: np.ndarray) -> np.ndarray:
    """lambda_max of a batch of symmetric positive semi-definite matrices."""
    if G.shape[-1] == 0:
        return np.zeros(G.shape[:-2])
    return np.maximum(np.linalg.eigvalsh(G)[..., -1], 0.0)
