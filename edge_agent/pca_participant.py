"""An agent's part in a federated PCA job: the client step works on the second moment C_i of its training
records around the global mean; the threshold histograms the training records' reconstruction errors.

A kernel job (round meta ``rff``: the four numbers of models.kernel.RandomFourierFeatures) lifts the
standardised records first, and C_i is the lifted records' uncentred second moment, as in
models.pca.simulator.prepare_clients."""

from __future__ import annotations

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from edge_agent.participant import Request
from models.detection.preprocessing import Moments, Preprocessor
from models.detection.robust import residuals, second_moment
from models.kernel import RandomFourierFeatures
from models.pca.base import PCAAlgorithm
from models.pca.messages import PCARound


class PCAParticipant(DetectorParticipant[PCARound]):
    family = "pca"
    round_message = PCARound

    def problem(self, msg: PCARound) -> dict[str, int]:
        lift = self.lift(msg)
        return {"n_features": len(msg.features) if lift is None else lift.n_components, "rank": int(msg.rank)}

    @staticmethod
    def lift(msg: PCARound) -> RandomFourierFeatures | None:
        if not msg.rff:
            return None
        lift = RandomFourierFeatures.from_params(msg.rff)
        if lift.n_features != len(msg.features):
            raise ValueError(f"the job's feature map takes {lift.n_features} features, not {len(msg.features)}")
        return lift

    def algorithm(self, msg: PCARound) -> PCAAlgorithm:
        alg = super().algorithm(msg)
        if not isinstance(alg, PCAAlgorithm):  # the family registry holds only PCAAlgorithm subclasses
            raise TypeError(f"{type(alg).__name__} is not a PCAAlgorithm")
        return alg

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        msg: PCARound = req.msg
        T = self.imputed(msg)
        lift = self.lift(msg)
        mean, scale = self.standardisation(msg)
        if lift is None:
            C = Moments.of(T).second_moment(mean, scale)
        else:
            C = second_moment(lift.transform((T - mean) / scale))
        return {"C": C[None], "weight": np.array([self.weight(req)])}

    def secure_family_values(self, name: str, req: Request, w: np.ndarray) -> dict[str, np.ndarray]:
        """Private mode's one sum of PCA: this device's weighted second moment of its standardised records."""
        from models.pca.private import moment_uploads, own_moment

        if name != "moments":
            return super().secure_family_values(name, req, w)
        moment = own_moment(self.preprocessor(req.msg).transform(self.records(req.msg)))
        return {k: v[0] for k, v in moment_uploads(w, moment[None]).items()}

    def noisy_family_values(self, name: str, req: Request) -> dict[str, np.ndarray]:
        """With differential privacy: this device's second moment of its standardised records (weight 1)."""
        from models.pca.private import own_moment

        if name != "moments":
            return super().noisy_family_values(name, req)
        return {"C": own_moment(self.preprocessor(req.msg).transform(self.records(req.msg)))}

    def threshold_errors(self, msg: PCARound, pre: Preprocessor) -> np.ndarray:
        Z = self.algorithm(msg).consensus(msg.broadcast)
        X = pre.transform(self.records(msg))
        lift = self.lift(msg)
        return residuals(X if lift is None else lift.transform(X), Z)
