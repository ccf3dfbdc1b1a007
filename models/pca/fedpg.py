"""FedPG (seed 004, Alg. 2): consensus ADMM with Riemannian gradient steps on the Grassmann manifold.

Each local step: G <- grad F(U); G <- G - U (U'G) (projection onto the tangent space);
U <- qf(U - eta G) (QR retraction). The step eta = 1 / (4 w lambda_max(C_i) + rho) comes from a bound
on the curvature of the local augmented Lagrangian, so no tuning is needed.
"""

from __future__ import annotations

import numpy as np

from models.federated import State
from models.linalg import orth
from models.pca.admm import ConsensusADMM


class FedPG(ConsensusADMM):
    name = "fedpg"

    def local_solve(self, state: State, C: np.ndarray, weight: np.ndarray, Z: np.ndarray) -> State:
        U = state["U"]
        eta = state["step"][:, None, None]
        for _ in range(self.local_steps):
            G = self.augmented_gradient(state, C, weight, Z, U)
            G = G - U @ (np.swapaxes(U, -1, -2) @ G)
            U = orth(U - eta * G)
        state["U"] = U
        return state
