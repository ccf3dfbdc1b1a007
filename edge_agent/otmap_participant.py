"""An agent's part in a transport-map job (coordinator.otmap_job): the statistics phase (DetectorParticipant's),
with the quantile start the histogram phase (the counts of its standardised records on models.otmap.quantile's
grid, float32: whole counts below 2^24 are exact), then in each sampled round the mean parameter gradient of
f_omega over its training records, standardised with the promoted detector's preprocessing the round carries and
moved by the start map it carries (models.otmap.fedmm's client step: numpy only)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from edge_agent.participant import Request
from models.core.messages import Upload
from models.detection.messages import DetectorRound
from models.detection.preprocessing import Preprocessor
from models.otmap.field import START
from models.otmap.quantile import QuantileMap, histogram
from wire.protocol import Envelope


class OTMapParticipant(DetectorParticipant[DetectorRound]):
    family = "otmap"

    def problem(self, msg: DetectorRound) -> dict[str, int]:
        return {"n_features": len(msg.features)}

    def phases(self) -> dict[str, Callable[[Request], Envelope | None]]:
        return {**super().phases(), "histogram": self._histogram}

    def _histogram(self, req: Request) -> Envelope:
        counts = histogram(self.standardised(req.msg)).astype(np.float32)
        return req.reply(Upload(arrays={"counts": counts}), self.id)

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        """The standardised records, moved by the start map the round carries (if any)."""
        X = np.empty(1, dtype=object)
        start = {k[len(START):]: v for k, v in req.msg.broadcast.items() if k.startswith(START)}
        X[0] = self.standardised(req.msg)
        if start:
            X[0] = QuantileMap.from_arrays(start)(X[0])
        return {"X": X}

    def threshold_errors(self, msg: DetectorRound, pre: Preprocessor) -> np.ndarray:
        raise ValueError("a transport-map job has no threshold phase: the mapped detector keeps its threshold")
