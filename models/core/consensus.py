"""General-form consensus ADMM (Boyd et al. 2011, sec. 7), written once: the skeleton FedPE and FedPG (seed
004, Alg. 1 and 2) and FedMC-ADMM (seed 000, Alg. 1) share. Each algorithm supplies only its local solver and
its constraint or regulariser.

Client i holds local variables x_i for the consensus coordinates it takes part in (all of them for PCA's basis;
for recommendation, the items it holds ratings for) and duals y_i; the server holds the consensus z. With the
penalty rho:

    local    x_i <- argmin_x f_i(x) + <y_i, x - z> + rho/2 ||x - z||^2   (the algorithm's solver: exactly, or
                                                                         a few local steps)
    message  m_i  = rho x_i + y_i                                         (`message`: all the server needs)
    server   z   <- argmin_z g(z) + sum_i rho/2 ||z - m_i / rho||^2      (`consensus`: per coordinate, over
              = prox_{g / (n rho)}(sum_i m_i / (n rho))                   the n clients counted for it)
    dual     y_i <- y_i + rho (x_i - z)                                  (`dual_step`)

Two things differ between the papers and are the algorithm's choice, not the core's:
- which clients are counted: this round's (FedPCA, eq. 8: z is the mean of the sampled clients' messages), or
  every client that has answered, with its last message (FedMC-ADMM, eq. 16: stale terms for the others). The
  second keeps running sums (`ConsensusSum`: S = sum of messages and n per coordinate, updated by each answering
  client's change of message), never a copy per client;
- which z the dual step uses: the new one (FedPCA, eq. 9: applied when the next broadcast arrives) or the one
  the client received (FedMC-ADMM's step (c), in the same client step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the regularisers g the server's z-update knows in closed form
REGULARIZERS = ("none", "l2", "l1")


def message(x: np.ndarray, y: np.ndarray, rho: float) -> np.ndarray:
    """m_i = rho x_i + y_i: what the server needs of a client's local variable and dual."""
    return rho * x + y


def dual_step(y: np.ndarray, x: np.ndarray, z: np.ndarray, rho: float) -> np.ndarray:
    """y_i + rho (x_i - z): dual ascent on the consensus constraint x_i = z."""
    return y + rho * (x - z)


def soft_threshold(v: np.ndarray, t: np.ndarray | float) -> np.ndarray:
    """sign(v) max(|v| - t, 0): the proximal map of t |.|_1 (seed 000, eq. 72)."""
    return np.sign(v) * np.maximum(np.abs(v) - t, 0.0)


def consensus(total: np.ndarray, count: np.ndarray | float, rho: float, regularizer: str = "none",
              gamma: float = 0.0) -> np.ndarray:
    """The z-update for coordinates (rows of `total`) whose messages sum to `total` over `count` clients:
    argmin_z g(z) + sum_i rho/2 ||z - m_i / rho||^2 with g = 0, gamma/2 ||z||^2 ("l2") or gamma |z|_1 ("l1").

        none:  z = total / (n rho)                       (the mean of the messages over rho)
        l2:    z = total / (n rho + gamma)               (seed 000, eq. 68)
        l1:    z = soft(total / (n rho), gamma / (n rho))   (eq. 73)"""
    n = np.asarray(count, dtype=float)
    if n.ndim:
        n = n.reshape(-1, *([1] * (np.ndim(total) - 1)))
    if regularizer == "none":
        return total / (n * rho)
    if regularizer == "l2":
        return total / (n * rho + gamma)
    if regularizer == "l1":
        return soft_threshold(total / (n * rho), gamma / (n * rho))
    raise ValueError(f"unknown regularizer {regularizer!r}; choose from {', '.join(REGULARIZERS)}")


@dataclass
class ConsensusSum:
    """Running sums for partial participation with stale terms: S[j] = sum of the last messages of the clients
    holding coordinate j, and count[j] how many clients that is. A client's first message joins the count; later
    ones replace its earlier message by adding the change."""

    total: np.ndarray  # (coordinates, ...) S
    count: np.ndarray  # (coordinates,) n

    def add(self, rows: np.ndarray, change: np.ndarray, new: bool | np.ndarray) -> None:
        """One client's change of message on its (distinct) coordinates; `new`: its first message (or, for a sum of
        clients' changes, how many of them join each coordinate)."""
        self.total[rows] += change  # rows are distinct within one client, so += is a scatter-add
        self.count[rows] += np.asarray(new, dtype=float)

    def z(self, rows: np.ndarray, rho: float, regularizer: str = "none", gamma: float = 0.0) -> np.ndarray:
        """The consensus of these coordinates (all held by at least one client)."""
        return consensus(self.total[rows], self.count[rows], rho, regularizer, gamma)
