"""FedPE (seed 004, Alg. 1): consensus ADMM with Euclidean gradient steps.

Orthonormality is handled by the surrogate constraint h(U) = max(0, U'U - I)^2 (elementwise) with its
own dual T_i and penalty: the local objective adds <T_i, h(U)> + rho/2 ||h(U)||^2, and T_i <- T_i +
rho h(U_i) after the round (eq. 10).
"""

from __future__ import annotations

import numpy as np

from models.core.federated import State
from models.pca.admm import ConsensusADMM


def surrogate(U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h(U) = max(0, U'U - I)^2 elementwise, and max(0, U'U - I)."""
    k = U.shape[-1]
    G = np.swapaxes(U, -1, -2) @ U - np.eye(k)
    P = np.maximum(G, 0.0)
    return P * P, P


def surrogate_gradient(U: np.ndarray, T: np.ndarray, rho: float) -> np.ndarray:
    """Gradient of <T, h(U)> + rho/2 ||h(U)||^2 with respect to U."""
    h, P = surrogate(U)
    A = (T + rho * h) * 2 * P  # d/dG of the two terms, G = U'U - I
    return U @ (A + np.swapaxes(A, -1, -2))


class FedPE(ConsensusADMM):
    name = "fedpe"
    curvature = 6.0

    def init_clients(self, data: State, broadcast: State) -> State:
        state = super().init_clients(data, broadcast)
        state["T"] = np.zeros((data["C"].shape[0], self.rank, self.rank))
        return state

    def local_solve(self, state: State, C: np.ndarray, weight: np.ndarray, Z: np.ndarray) -> State:
        U = state["U"]
        eta = state["step"][:, None, None]
        for _ in range(self.local_steps):
            G = self.augmented_gradient(state, C, weight, Z, U) + surrogate_gradient(U, state["T"], self.rho)
            U = U - eta * G
        state["U"] = U
        return state

    def finish_extra(self, state: State, pending: np.ndarray) -> State:
        h, _ = surrogate(state["U"])
        state["T"] = state["T"] + np.where(pending[:, None, None], self.rho * h, 0.0)
        return state
