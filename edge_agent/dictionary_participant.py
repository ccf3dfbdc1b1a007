"""An agent's part in a federated dictionary-learning job: the client step codes its standardised training records
under the broadcast dictionary (models.dictionary.fedmm); the threshold histograms their scores under the final
one, as the agent will score its traffic."""

from __future__ import annotations

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from edge_agent.participant import Request
from models.detection.messages import DetectorRound
from models.detection.preprocessing import Preprocessor
from models.dictionary.detector import DictionaryDetector
from models.dictionary.fedmm import FedMMDictionary


class DictionaryParticipant(DetectorParticipant[DetectorRound]):
    family = "dict"

    def problem(self, msg: DetectorRound) -> dict[str, int]:
        return {"n_features": len(msg.features)}

    def algorithm(self, msg: DetectorRound) -> FedMMDictionary:
        alg = super().algorithm(msg)
        if not isinstance(alg, FedMMDictionary):
            raise TypeError(f"{type(alg).__name__} is not FedMMDictionary")
        return alg

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        X = np.empty(1, dtype=object)
        X[0] = self.standardised(req.msg)
        return {"X": X}

    def threshold_errors(self, msg: DetectorRound, pre: Preprocessor) -> np.ndarray:
        alg = self.algorithm(msg)
        det = DictionaryDetector.from_model(alg.consensus(msg.broadcast), pre, 1.0, lam=alg.lam)
        return np.asarray(det.losses(self.standardised(msg)))
