"""FedPE and FedPG (seed 004, Alg. 1 and 2) as instances of the general-form consensus ADMM of
`models.core.consensus` (x_i = U_i, z = Z, g = 0; every client holds every coordinate, and z averages this round's
clients only, eq. 8). Subclasses supply the local solver and the orthonormality they keep.

    client:  U_i <- argmin_U  w_i f_i(U) + <Y_i, U - Z> + rho/2 ||U - Z||^2   (C local steps)
    upload:  U_i + Y_i / rho
    server:  Z   <- mean over the sampled clients of (U_i + Y_i / rho)         (eq. 8)
    client:  Y_i <- Y_i + rho (U_i - Z_new)  once the next consensus arrives   (eq. 9)

f_i is the client's mean reconstruction error and w_i = n_i / mean(n) its share of the records, so
sum_i w_i f_i is the pooled objective up to a constant. Subclasses supply the local solver.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import numpy as np

from models.core.aggregation import AGGREGATORS, aggregate, clip_norms
from models.core.consensus import consensus, dual_step, message
from models.core.federated import State, step_count
from models.core.linalg import orth, procrustes_align
from models.pca.base import PCAAlgorithm
from models.pca.objective import reconstruction_gradient


class ConsensusADMM(PCAAlgorithm):
    #: curvature factor of the local objective used to derive the step size
    curvature = 4.0
    #: attacks that mean nothing for it (models.detection.attacks.not_applicable): its uploads are a basis
    not_attacked: ClassVar[dict[str, str]] = {
        **PCAAlgorithm.not_attacked,
        "non-psd": "non-psd needs uploads of second moments the server can check: {algorithm} uploads a basis (use "
        "--algorithm fedmm, or --detector gmm)"}

    def __init__(self, n_features: int, rank: int = 3, rho: float | None = None, local_steps: int = 10,
                 lr: float | None = None, aggregator: str = "mean", trim: float = 0.2):
        super().__init__(n_features, rank)
        if aggregator not in AGGREGATORS:
            raise ValueError(f"unknown aggregator {aggregator!r}; choose from {', '.join(AGGREGATORS)}")
        if not 0 <= trim < 0.5:
            raise ValueError("trim must be in [0, 0.5)")
        self.aggregator, self.trim = aggregator, float(trim)
        if rho is not None and rho <= 0:
            raise ValueError("rho must be positive")
        step_count("local_steps", local_steps)
        #: default rho = d. Features are standardised with global statistics, so the pooled second
        #: moment has trace d: rho = d puts the consensus penalty on the scale of the whole local
        #: curvature, which keeps each U_i near Z and stops the average of a small sample of non-i.i.d.
        #: clients from throwing Z around (the rho sweep on nsl-kdd is in the README).
        self.rho = float(n_features) if rho is None else float(rho)
        self.local_steps = int(local_steps)
        self.lr = lr

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        Z = orth(rng.standard_normal((self.n_features, self.rank)))
        return {"Z": Z}, {"Z": Z}

    def init_clients(self, data: State, broadcast: State) -> State:
        C, weight = data["C"], data["weight"]
        b = C.shape[0]
        Z = broadcast["Z"]
        if self.lr is None:
            lam = np.linalg.eigvalsh(C)[..., -1]
            step = 1.0 / (self.curvature * weight * np.maximum(lam, 1e-12) + self.rho)
        else:
            step = np.full(b, float(self.lr))
        return {
            "U": np.broadcast_to(Z, (b, *Z.shape)).copy(),
            "Y": np.zeros((b, *Z.shape)),
            "step": step,
            "pending": np.zeros(b, dtype=bool),
        }

    @abstractmethod
    def local_solve(self, state: State, C: np.ndarray, weight: np.ndarray, Z: np.ndarray) -> State:
        """Run the local steps; return the state with the new U (and any solver-specific variables)."""

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        state = self.client_finish(state, broadcast)
        state = self.local_solve(dict(state), data["C"], data["weight"], broadcast["Z"])
        state["pending"] = np.ones(len(state["pending"]), dtype=bool)
        return state, {"U": message(state["U"], state["Y"], self.rho) / self.rho}  # U_i + Y_i / rho

    def client_finish(self, state: State, broadcast: State) -> State:
        p = state["pending"]
        if not p.any():
            return state
        state = dict(state)
        state["Y"] = np.where(p[:, None, None], dual_step(state["Y"], state["U"], broadcast["Z"], self.rho), state["Y"])
        state["pending"] = np.zeros_like(p)
        return self.finish_extra(state, p)

    def finish_extra(self, state: State, pending: np.ndarray) -> State:
        """Further dual updates of a subclass, for the clients flagged in pending."""
        return state

    def server_update(
        self, server: State, client_ids: np.ndarray, uploads: State, weight: np.ndarray
    ) -> tuple[State, State]:
        if len(client_ids) == 0:
            return server, {"Z": server["Z"]}
        if self.aggregator == "mean":  # the paper's eq. (8): the consensus of this round's clients
            Z = consensus(self.rho * uploads["U"].sum(axis=0), len(client_ids), self.rho)
        else:  # align each upload to the consensus (U and UR span the same subspace), clip, combine robustly
            X = clip_norms(procrustes_align(uploads["U"], orth(server["Z"])))
            Z = aggregate(X, weight, self.aggregator, self.trim)
        return {"Z": Z}, {"Z": Z}

    def consensus(self, broadcast: State) -> np.ndarray:
        return orth(broadcast["Z"])

    def upload_bytes(self) -> int:
        return self.n_features * self.rank * 8

    def augmented_gradient(self, state: State, C: np.ndarray, weight: np.ndarray, Z: np.ndarray,
                           U: np.ndarray) -> np.ndarray:
        """Gradient of w f(U) + <Y, U - Z> + rho/2 ||U - Z||^2."""
        return weight[:, None, None] * reconstruction_gradient(C, U) + state["Y"] + self.rho * (U - Z)
