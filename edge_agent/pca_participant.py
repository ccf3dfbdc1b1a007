"""An agent's part in a federated PCA job: the client step works on the second moment C_i of its training
records around the global mean; the threshold histograms the training records' reconstruction errors."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from models.pca.base import PCAAlgorithm
from models.preprocessing import Moments, Preprocessor
from models.robust import residuals
from wire.protocol import Envelope


class PCAParticipant(DetectorParticipant):
    family = "pca"

    def problem(self, meta: dict[str, Any]) -> dict[str, int]:
        return {"n_features": len(meta["features"]), "rank": int(meta["rank"])}

    def algorithm(self, meta: dict[str, Any]) -> PCAAlgorithm:
        alg = super().algorithm(meta)
        if not isinstance(alg, PCAAlgorithm):  # the family registry holds only PCAAlgorithm subclasses
            raise TypeError(f"{type(alg).__name__} is not a PCAAlgorithm")
        return alg

    def client_data(self, env: Envelope) -> dict[str, np.ndarray]:
        C = Moments.of(self.imputed(env)).second_moment(env.arrays["mean"], env.arrays["scale"])
        return {"C": C[None], "weight": np.array([self.weight(env)])}

    def threshold_errors(self, env: Envelope, pre: Preprocessor) -> np.ndarray:
        Z = self.algorithm(env.meta).consensus(self.broadcast(env))
        return residuals(pre.transform(self.records(env.meta)), Z)
