"""AltGDMin (seed 002, Alg. 1): alternating exact minimisation on the nodes, one gradient step and a QR at
the centre.

Roles: the centre holds orthonormal *item factors* Q (items x rank); a node (client) holds its users'
coefficients b_t (their private *user factors*). Per round:

    client  b_t   <- argmin_b |y_t - Q_Omega b|^2 for each of its users       (eq. 4; a small ridge added)
            grad  <- (Q b_t - y_t)_Omega b_t' summed over its users        (eq. 6, rows of the items it holds)
    server  Q     <- QR(Q - eta grad)                                       (eq. 5)

Initialisation as the paper: Q = top singular vectors of the observed (centred) rating matrix Y, by
simultaneous power iteration, each client uploading Y_i (Y_i' Z) (`setup_rounds` rounds with every
client before round 1), and eta = p / |Y|_op^2 (p = observed share, the paper's eq. 13).

Added, because real ratings are not an exactly low-rank, noiseless matrix observed at random:
- a ridge term lam on b_t (users may have fewer ratings than rank + 1, and ratings are noisy). Q's
  columns have unit norm, so Q_Omega'Q_Omega ~ (|Omega_t| / n) I: lam = 1 shrinks like n ratings would.
  A validation split of movielens-small put the best value near 1.5, a strong shrinkage;
- biases: the user bias is solved with b_t (one more coefficient); the item biases c are minimised
  exactly at the centre, c_j = T_j / (n_j + gamma), from a running sum T_j of sum_t (r_tj - b_t - q_j.b_t)
  that sampled clients' changes update (as FedMC-ADMM's V);
- partial participation: the sampled clients' gradients are scaled by N / |S| (an unbiased estimate of
  the full gradient the paper sums over all nodes).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from models.core.federated import State, step_count
from models.core.linalg import orth
from models.recsys.base import RecsysAlgorithm
from models.recsys.batch import RatingBatch
from models.recsys.factors import ridge_solve


class AltGDMin(RecsysAlgorithm):
    name = "altgdmin"
    summed: ClassVar[dict[str, str]] = {"gradient": "raters", "bias_delta": "raters", "bias_count": "count",
                                        "power": "raters", "ratings": "catalogue", "users": "count"}

    def __init__(self, n_items: int, rank: int = 10, lam: float = 1.5, gamma: float = 2.0, lr: float = 1.0,
                 power_iterations: int = 10):
        super().__init__(n_items, rank, lam, gamma, "l2", 1.0)
        if lr <= 0:
            raise ValueError("lr must be positive")
        step_count("power_iterations", power_iterations)
        self.lr = float(lr)
        self.setup_rounds = int(power_iterations)

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        Z = orth(rng.standard_normal((self.n_items, self.rank)))
        server = {"basis": Z, "item_bias": np.zeros(self.n_items), "bias_sum": np.zeros(self.n_items),
                  "bias_count": np.zeros(self.n_items), "step": np.zeros(()), "setup_done": np.zeros(()),
                  "n_clients": np.array(float(n_clients))}
        return server, self._broadcast(server)

    def _broadcast(self, server: State) -> State:
        return {"item_factors": np.column_stack([server["basis"], server["item_bias"]]),
                "item_seen": server["bias_count"] > 0}

    def init_clients(self, data: State, broadcast: State) -> State:
        b, J = data["items"].shape
        return {"user_factors": self.zero_users(data), "bias_sum": np.zeros((b, J)),
                "joined": np.zeros(b, dtype=bool)}

    # spectral initialisation: power iteration on Y Y' with every client
    def client_setup(self, state: State, data: State, broadcast: State) -> State:
        batch = RatingBatch.of(data)
        Z = broadcast["item_factors"][batch.item_ids, :-1]
        power = batch.item_sums(batch.target, batch.user_sums(batch.target, Z))  # Y_i'(Y_i Z)
        return {"items": data["items"], "item_mask": data["item_mask"], "power": batch.scatter(power),
                "ratings": data["mask"].sum(axis=1).astype(float),
                "users": data["user_mask"].sum(axis=1).astype(float)}

    def server_setup(self, server: State, uploads: State) -> tuple[State, State]:
        M = np.zeros((self.n_items, self.rank))
        for items, mask, power in zip(uploads["items"], uploads["item_mask"], uploads["power"]):
            M[items[mask]] += power[mask]
        server = dict(server)
        Z_old = server["basis"]
        server["basis"] = orth(M)
        server["setup_done"] = server["setup_done"] + 1
        if server["setup_done"] >= self.setup_rounds:
            sigma2 = max(float(np.linalg.eigvalsh(Z_old.T @ M)[-1]), 1e-12)  # |Y|_op^2 (Rayleigh quotient)
            share = uploads["ratings"].sum() / (self.n_items * max(uploads["users"].sum(), 1.0))
            server["step"] = np.array(self.lr * share / sigma2)
        return server, self._broadcast(server)

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        batch = RatingBatch.of(data)
        b, k = batch.n_clients, self.width
        Q = broadcast["item_factors"][batch.item_ids]
        P = ridge_solve(*batch.user_grams(Q), self.lam)  # eq. (4) for every user, with its bias
        grad = batch.item_side(P).gradient(Q)  # columns: sum_t e_tj b_t (basis) and sum_t e_tj (item bias)
        counts = batch.item_counts().astype(float)
        T = counts * Q[:, -1] - grad[:, -1]  # sum_t (r_tj - b_t - q_j.b_t)
        joined = state["joined"][batch.slot_client]
        T_old = np.where(joined, batch.gather(state["bias_sum"]), 0.0)
        new_state = {"user_factors": P.reshape(b, batch.M, k), "bias_sum": batch.scatter(T),
                     "joined": np.ones(b, dtype=bool)}
        uploads = {"items": data["items"], "item_mask": data["item_mask"], "gradient": batch.scatter(grad[:, :-1]),
                   "bias_delta": batch.scatter(T - T_old), "bias_count": batch.scatter(np.where(joined, 0.0, counts))}
        return new_state, uploads

    def server_update(
        self, server: State, client_ids: np.ndarray, uploads: State, weight: np.ndarray
    ) -> tuple[State, State]:
        server = dict(server)
        grad = np.zeros((self.n_items, self.rank))
        T, n = server["bias_sum"].copy(), server["bias_count"].copy()
        for items, mask, g, dT, dn in zip(uploads["items"], uploads["item_mask"], uploads["gradient"],
                                          uploads["bias_delta"], uploads["bias_count"]):
            items = items[mask]
            grad[items] += g[mask]
            T[items] += dT[mask]
            n[items] += dn[mask]
        if len(client_ids):
            scale = float(server["n_clients"]) / len(client_ids)
            server["basis"] = orth(server["basis"] - 2.0 * float(server["step"]) * scale * grad)
        server["bias_sum"], server["bias_count"] = T, n
        server["item_bias"] = np.where(n > 0, T / (n + self.gamma), 0.0)
        return server, self._broadcast(server)
