"""FedPG (seed 004, Alg. 2): consensus ADMM with Riemannian gradient steps on the Grassmann manifold.

Each local step: G <- grad F(U); G <- G - U (U'G) (projection onto the tangent space);
U <- qf(U - eta G) (QR retraction). The step eta = 1 / (4 w lambda_max(C_i) + rho) comes from a bound
on the curvature of the local augmented Lagrangian, so no tuning is needed.

U stays orthonormal, so grad F = w(-2 C U + 2 U U'CU) + Y + rho (U - Z), and the terms in span(U)
vanish under the projection: the step only needs C U, which is what makes it cheap.
"""

from __future__ import annotations

import numpy as np

from models.core.federated import State
from models.core.linalg import cholesky_qr, orth
from models.pca.admm import ConsensusADMM


class FedPG(ConsensusADMM):
    name = "fedpg"

    def local_solve(self, state: State, C: np.ndarray, weight: np.ndarray, Z: np.ndarray) -> State:
        U = orth(state["U"])
        eta = state["step"][:, None, None]
        w2 = (-2 * weight)[:, None, None]
        offset = state["Y"] - self.rho * Z
        for _ in range(self.local_steps):
            B = w2 * (C @ U) + offset
            G = B - U @ (np.swapaxes(U, -1, -2) @ B)
            U = cholesky_qr(U - eta * G)
        state["U"] = U
        return state
