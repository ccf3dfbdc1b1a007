"""An agent's part in a transport-map job (coordinator.otmap_job): the statistics phase (DetectorParticipant's),
then in each sampled round the mean parameter gradient of f_omega over its training records, standardised with
the promoted detector's preprocessing the round carries (models.otmap.fedmm's client step: numpy only)."""

from __future__ import annotations

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from edge_agent.participant import Request
from models.detection.messages import DetectorRound
from models.detection.preprocessing import Preprocessor


class OTMapParticipant(DetectorParticipant[DetectorRound]):
    family = "otmap"

    def problem(self, msg: DetectorRound) -> dict[str, int]:
        return {"n_features": len(msg.features)}

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        X = np.empty(1, dtype=object)
        X[0] = self.standardised(req.msg)
        return {"X": X}

    def threshold_errors(self, msg: DetectorRound, pre: Preprocessor) -> np.ndarray:
        raise ValueError("a transport-map job has no threshold phase: the mapped detector keeps its threshold")
