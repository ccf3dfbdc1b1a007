"""An agent's part in a federated PCA job: the client step works on the second moment C_i of its training
records around the global mean; the threshold histograms the training records' reconstruction errors.

A kernel job (round meta ``rff``: the four numbers of models.kernel.RandomFourierFeatures) lifts the
standardised records first, and C_i is the lifted records' uncentred second moment, as in
models.pca.simulator.prepare_clients."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from models.detection.preprocessing import Moments, Preprocessor
from models.detection.robust import residuals, second_moment
from models.kernel import RandomFourierFeatures
from models.pca.base import PCAAlgorithm
from wire.protocol import Envelope


class PCAParticipant(DetectorParticipant):
    family = "pca"

    def problem(self, meta: dict[str, Any]) -> dict[str, int]:
        lift = self.lift(meta)
        return {"n_features": len(meta["features"]) if lift is None else lift.n_components, "rank": int(meta["rank"])}

    @staticmethod
    def lift(meta: dict[str, Any]) -> RandomFourierFeatures | None:
        if not meta.get("rff"):
            return None
        lift = RandomFourierFeatures.from_params(meta["rff"])
        if lift.n_features != len(meta["features"]):
            raise ValueError(f"the job's feature map takes {lift.n_features} features, not {len(meta['features'])}")
        return lift

    def algorithm(self, meta: dict[str, Any]) -> PCAAlgorithm:
        alg = super().algorithm(meta)
        if not isinstance(alg, PCAAlgorithm):  # the family registry holds only PCAAlgorithm subclasses
            raise TypeError(f"{type(alg).__name__} is not a PCAAlgorithm")
        return alg

    def client_data(self, env: Envelope) -> dict[str, np.ndarray]:
        T = self.imputed(env)
        lift = self.lift(env.meta)
        if lift is None:
            C = Moments.of(T).second_moment(env.arrays["mean"], env.arrays["scale"])
        else:
            C = second_moment(lift.transform((T - env.arrays["mean"]) / env.arrays["scale"]))
        return {"C": C[None], "weight": np.array([self.weight(env)])}

    def threshold_errors(self, env: Envelope, pre: Preprocessor) -> np.ndarray:
        Z = self.algorithm(env.meta).consensus(self.broadcast(env))
        X = pre.transform(self.records(env.meta))
        lift = self.lift(env.meta)
        return residuals(X if lift is None else lift.transform(X), Z)
