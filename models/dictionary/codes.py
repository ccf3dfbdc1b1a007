"""Lasso codes of records under a dictionary (seed 003 eq. 16 with chi = lambda ||.||_1), by FISTA.

    h(z) = argmin_h 1/2 ||z - theta h||^2 + lambda ||h||_1

batched over records: with G = theta'theta and B = Z theta, the gradient of the smooth part at H (records x
atoms) is H G - B, so an iteration costs records x atoms^2 whatever the number of features. One function serves
training (float64, run to a tolerance: the statistics the server aggregates) and scoring (float32, a fixed number
of iterations, every temporary allocated once and updated in place: the device's throughput)."""

from __future__ import annotations

import numpy as np

#: iterations of a training solve at most, and its stopping rule (largest change of a code, relative to the
#: largest code)
TRAIN_STEPS, TRAIN_TOL = 500, 1e-7
#: iterations of a scoring solve (float32, no stopping test: a fixed cost per record)
SCORE_STEPS = 40
#: records per block of a training solve
CHUNK = 4096


def lasso_codes(Z: np.ndarray, theta: np.ndarray, lam: float, steps: int = TRAIN_STEPS, tol: float | None = TRAIN_TOL,
                dtype: type = np.float64) -> np.ndarray:
    """The codes (records x atoms) of records Z (records x features) under theta (features x atoms), in `dtype`.
    `tol` None: exactly `steps` iterations; otherwise stop once no code moves by more than tol x the largest."""
    theta = np.asarray(theta, dtype=dtype)
    G = theta.T @ theta
    L = float(np.linalg.eigvalsh(G.astype(np.float64))[-1]) if G.size else 0.0
    n, K = Z.shape[0], theta.shape[1]
    H: np.ndarray = np.zeros((n, K), dtype=dtype)
    if L <= 0 or n == 0:
        return H
    B = np.asarray(Z, dtype=dtype) @ theta
    B *= dtype(1.0 / L)  # the gradient step in one product: Y - (Y G - B)/L = Y (I - G/L) + B/L
    A = (np.eye(K, dtype=dtype) - G / dtype(L)).astype(dtype)
    shrink = dtype(lam / L)
    Y, H_old, step = np.zeros_like(H), np.zeros_like(H), np.empty_like(H)
    t = 1.0
    for _ in range(steps):
        np.matmul(Y, A, out=step)
        step += B
        H_old, H = H, H_old
        # soft threshold: sign(x) max(|x| - shrink, 0), in place
        np.abs(step, out=H)
        H -= shrink
        np.maximum(H, 0, out=H)
        np.copysign(H, step, out=H)
        t_next = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        np.subtract(H, H_old, out=Y)
        if tol is not None:
            moved = float(np.abs(Y).max())
            if moved <= tol * max(float(np.abs(H).max()), 1e-12):
                break
        Y *= dtype((t - 1.0) / t_next)
        Y += H
        t = t_next
    return H


def objective_terms(Z: np.ndarray, H: np.ndarray, theta: np.ndarray, lam: float) -> np.ndarray:
    """Per record, 1/2 ||z - theta h||^2 + lambda ||h||_1 (the anomaly score and the loss of eq. 28)."""
    R = Z - H @ theta.T
    return 0.5 * np.einsum("ij,ij->i", R, R) + lam * np.abs(H).sum(axis=1)


def statistics(Z: np.ndarray, theta: np.ndarray, lam: float, steps: int = TRAIN_STEPS,
               tol: float = TRAIN_TOL) -> tuple[np.ndarray, np.ndarray]:
    """A client's surrogate statistics (eq. 18) under theta, in float64: S1 = mean h h', S2 = mean z h'; a chunk of
    records at a time (a device's memory follows the chunk, not its 50,000 records)."""
    p, K = theta.shape
    S1, S2 = np.zeros((K, K)), np.zeros((p, K))
    for i in range(0, len(Z), CHUNK):
        X = np.asarray(Z[i: i + CHUNK], dtype=np.float64)
        H = lasso_codes(X, theta, lam, steps, tol)
        S1 += H.T @ H
        S2 += X.T @ H
    n = max(len(Z), 1)
    return S1 / n, S2 / n
