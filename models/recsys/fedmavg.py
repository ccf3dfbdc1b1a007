"""FedMAvg, the baseline of seed 000 (sec. 5.2, after its ref. [42]): local gradient steps, server averaging.

    client  U_i <- Q1 gradient steps on 1/2 |P(M_i - U_i V)|^2 + lam/2 |U_i|^2, step 1/c with c each user's
                   Lipschitz constant lambda_max(sum_j d_j d_j') + lam (the paper leaves c^k open)
            W_i <- V, then Q2 gradient steps on 1/2 |P(M_i - U_i W)|^2 + gamma/2 |W|^2 with step 1/d,
                   d = 5 lambda_max(U_i'U_i) as in the paper
    upload  W_i - V on the items the client holds (elsewhere W_i = V: there is no gradient there)
    server  V <- mean over the sampled clients of W_i   (V <- V + sum_i (W_i - V) / |S_k|)

Same packed biased model as every algorithm here. The paper divides the data gradient by the number of
clients p but not d, a step p times smaller; we use the local objective as written above (the stronger
baseline). The server keeps nothing but V.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from models.core.federated import State, step_count
from models.recsys.base import RecsysAlgorithm
from models.recsys.batch import RatingBatch
from models.recsys.factors import largest_eigenvalue, prox_step


class FedMAvg(RecsysAlgorithm):
    name = "fedmavg"
    summed: ClassVar[dict[str, str]] = {"delta": "factor"}

    def __init__(self, n_items: int, rank: int = 10, lam: float = 10.0, gamma: float = 10.0,
                 local_steps: int = 10, step_factor: float = 5.0, init_scale: float = 0.1):
        super().__init__(n_items, rank, lam, gamma, "l2", init_scale)
        step_count("local_steps", local_steps)
        if step_factor <= 0:
            raise ValueError("step_factor must be positive")
        self.local_steps = int(local_steps)
        self.step_factor = float(step_factor)

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        V = self.random_items(rng)
        seen = np.zeros(self.n_items, dtype=bool)
        return {"item_factors": V, "item_seen": seen}, {"item_factors": V, "item_seen": seen}

    def init_clients(self, data: State, broadcast: State) -> State:
        return {"user_factors": self.zero_users(data)}

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        batch = RatingBatch.of(data)
        b, k = batch.n_clients, self.width
        V = broadcast["item_factors"][batch.item_ids]
        P = state["user_factors"].reshape(b * batch.M, k)
        G, rhs = batch.user_grams(V)
        L = np.maximum(largest_eigenvalue(G), 1e-12)
        for _ in range(self.local_steps):
            P = prox_step(P, np.einsum("nij,nj->ni", G, P) - rhs, L, self.lam)
        E = P * batch.user_valid[:, None]
        E[:, -1] = batch.user_valid
        Eb = E.reshape(b, batch.M, k)
        d = self.step_factor * np.maximum(largest_eigenvalue(np.swapaxes(Eb, 1, 2) @ Eb), 1e-12)
        step = (1.0 / d)[batch.slot_client][:, None]
        raters = batch.item_side(P)
        W = V.copy()
        for _ in range(self.local_steps):
            W -= step * (raters.gradient(W) + self.gamma * W)
        return {"user_factors": P.reshape(b, batch.M, k)}, {
            "items": data["items"], "item_mask": data["item_mask"], "delta": batch.scatter(W - V)}

    def server_update(
        self, server: State, client_ids: np.ndarray, uploads: State, weight: np.ndarray
    ) -> tuple[State, State]:
        V = server["item_factors"].copy()
        seen = server["item_seen"].copy()
        n = max(len(client_ids), 1)
        for items, mask, delta in zip(uploads["items"], uploads["item_mask"], uploads["delta"]):
            V[items[mask]] += delta[mask] / n
            seen[items[mask]] = True
        return {"item_factors": V, "item_seen": seen}, {"item_factors": V, "item_seen": seen}
