"""What every federated PCA algorithm adds to the generic contract.

Client data for PCA is ``{"C": (b, d, d) second moments, "weight": (b,) shares of the records}``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import numpy as np

from models.core.federated import FederatedAlgorithm, State


class PCAAlgorithm(FederatedAlgorithm):
    #: attacks that mean nothing for it (models.detection.attacks.not_applicable)
    not_attacked: ClassVar[dict[str, str]] = {
        name: f"{name} lies in a private mixture's support row; a PCA upload has none (use --detector gmm --private)"
        for name in ("support-inflate", "support-nonbit")}

    def __init__(self, n_features: int, rank: int = 3):
        if not 1 <= rank < n_features:
            raise ValueError(f"rank must be between 1 and {n_features - 1} (the number of features - 1), got {rank}")
        self.n_features = int(n_features)
        self.rank = int(rank)

    def broadcast_bytes(self) -> int:
        return self.upload_bytes()  # the consensus basis (FedMM: the sketch) is as large as an upload

    def client_bytes(self) -> int:
        """The second moment C_i and a gradient-sized temporary of it (d x d each), the local basis and its dual."""
        d = self.n_features
        return 8 * (2 * d * d + 4 * d * max(self.rank, self.upload_bytes() // (8 * d)))

    def attach_bounds(self, server: State, diag: np.ndarray, trace: np.ndarray) -> State:
        """Give the server what the statistics phase says about each client's C_i: its diagonal (n, d) and a
        bound on its trace (n,), used to validate uploads."""
        return server

    @abstractmethod
    def consensus(self, broadcast: State) -> np.ndarray:
        """The orthonormal d x k basis Z that the detector scores with."""
