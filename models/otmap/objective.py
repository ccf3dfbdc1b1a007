"""The federated transport-map objective of seed 003, eq. 33 (Korotin et al. 2021a's eq. 32 averaged over clients):

    W(omega, theta) = sum_i mu_i E_{P_i}[f_omega(X)] + E_Q[<grad f_theta(Y), Y> - f_omega(grad f_theta(Y))]
                      + lambda E_Q ||grad f_omega(grad f_theta(Y)) - Y||^2

grad f_omega is the map P -> Q, grad f_theta its inverse. Only the first term needs the clients' records; the rest
is on Q, which the server samples. Gradients in omega are exact (models.otmap.icnn's hand-written derivatives).
Theta is moved by the cycle term alone: the correlation term <x, Y> - f_omega(x) at x = grad f_theta(Y) is largest
at the exact inverse, so descending it pushes theta away (W2GN, Korotin et al. 2021a, App. C.1: their code detaches
the inverse map there); the cycle term pulls grad f_theta onto the inverse of grad f_omega."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.otmap.icnn import Layout, potential, potential_grad, transport, transport_vjp

#: records per block of an agent's gradient: the network's activations of a block (about eight arrays of records x
#: hidden units) stay near 2 MiB each at 64 units, whatever the records held (50,000 at once: 25 MiB each)
CHUNK = 4096


def source_grad(layout: Layout, omega: np.ndarray, X: np.ndarray) -> np.ndarray:
    """E_i[grad_omega f_omega(X)] over a client's records (any float dtype): what an agent uploads, summed a block
    of records at a time."""
    n = len(X)
    out = np.zeros(layout.size)
    for i in range(0, n, CHUNK):
        out += potential_grad(layout, omega, np.asarray(X[i:i + CHUNK], dtype=float), 1.0 / n)
    return out


def source_value(layout: Layout, omega: np.ndarray, X: np.ndarray) -> float:
    return float(potential(layout, omega, X).mean())


def target_terms(layout: Layout, omega: np.ndarray, theta: np.ndarray, Y: np.ndarray, lam: float
                 ) -> tuple[float, np.ndarray, np.ndarray]:
    """The Q part of W on the records Y: (its value, its gradient in omega (G_Q), the cycle term's gradient in
    theta)."""
    n = len(Y)
    Xh = transport(layout, theta, Y)  # grad f_theta(Y): Y carried back to P
    r = transport(layout, omega, Xh) - Y  # the cycle's residual
    value = float(np.einsum("ij,ij->", Xh, Y) / n - potential(layout, omega, Xh).mean()
                  + lam * np.einsum("ij,ij->", r, r) / n)
    g_cycle, Hr = transport_vjp(layout, omega, Xh, 2 * lam * r / n)  # lambda E||r||^2: in omega, and in Xh
    G_Q = g_cycle - potential_grad(layout, omega, Xh, 1.0 / n)
    G_theta = transport_vjp(layout, theta, Y, Hr)[0]  # the cycle's cotangent on Xh, carried to theta
    return value, G_Q, G_theta


def theta_grad(layout: Layout, omega: np.ndarray, theta: np.ndarray, Y: np.ndarray, lam: float) -> np.ndarray:
    """`target_terms`' gradient in theta alone (what the server's theta steps need), without its value and G_Q."""
    n = len(Y)
    Xh = transport(layout, theta, Y)
    r = transport(layout, omega, Xh) - Y
    Hr = transport_vjp(layout, omega, Xh, 2 * lam * r / n, params=False)[1]
    return transport_vjp(layout, theta, Y, Hr)[0]


def objective(layout: Layout, omega: np.ndarray, theta: np.ndarray, parts: Sequence[np.ndarray],
              mu: np.ndarray, Y: np.ndarray, lam: float) -> float:
    """W(omega, theta) (eq. 33) on the clients' records and the records Y of Q."""
    source = sum(float(m) * source_value(layout, omega, X) for m, X in zip(mu, parts))
    return source + target_terms(layout, omega, theta, Y, lam)[0]


def l2_uvp(mapped: np.ndarray, true: np.ndarray) -> float:
    """L2-UVP (Korotin et al. 2021b): 100 E_P||m(X) - m*(X)||^2 / Var(Q), Var(Q) the trace of the covariance of
    m*(X) (the benchmark's code: the sum of the per-feature variances)."""
    return float(100 * np.mean(np.sum((mapped - true) ** 2, axis=1)) / np.sum(true.var(axis=0)))


def grad_bound(layout: Layout, omega: np.ndarray, second: np.ndarray | float) -> np.ndarray:
    """An upper bound on ||E_i[grad_omega f_omega(X)]|| for a client whose records have E||x||^2 = `second`:
    what no honest upload exceeds. Per record the gradient's norm is at most c0 + c1 ||x|| + c2 ||x||^2
    (softplus(h) <= |h| + log 2, its derivative in [0, 1], Frobenius norms bounding the layers), so by Jensen
    the mean's is at most c0 + c1 sqrt(second) + c2 second."""
    p = layout.unpack(np.asarray(omega, dtype=float))
    n = {k: float(np.linalg.norm(v)) for k, v in p.items()}
    slack = np.sqrt(layout.hidden) * np.log(2)
    # ||z1|| <= a1 r + b1, ||softplus(h2)|| <= a2 r + b2, ||d2|| <= ||a||, ||d1|| <= ||a|| ||A1||
    a1, b1 = n["W0"], n["b0"] + slack
    a2, b2 = n["A1"] * a1 + n["W1"], n["A1"] * b1 + n["b1"] + slack
    d2, d1 = n["a"], n["a"] * n["A1"]
    c0 = b2 + d2 * b1 + d2 + d1  # a, A1, b1, b0
    c1 = a2 + 1 + d2 * a1 + d2 + d1  # a, w, A1, W1, W0
    c2 = n["L"]  # L: ||x x' L|| <= ||x||^2 ||L||
    s = np.maximum(np.asarray(second, dtype=float), 0.0)
    return c0 + c1 * np.sqrt(s) + c2 * s
