"""An agent's part in a transport-map job (coordinator.otmap_job): the statistics phase (DetectorParticipant's),
with the quantile start the histogram phase (the counts of its standardised records on models.otmap.quantile's
grid, float32: whole counts below 2^24 are exact), then in each sampled round the mean parameter gradient of
f_omega over its training records, standardised with the promoted detector's preprocessing the round carries and
moved by the start map whose digest it names (models.otmap.fedmm's client step: numpy only). The start map travels
once, in a round's `init` (models.otmap.messages.OTMapRound): the agent keeps it on disk whether or not that round
samples it, so a restarted agent still has it; an agent asked to train without it declines (NO_START) and the
coordinator sends it again."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from edge_agent.participant import Request
from models.core.messages import Upload
from models.detection.messages import DetectorRound
from models.detection.preprocessing import Preprocessor
from models.otmap.field import START
from models.otmap.messages import NO_START, OTMapRound
from models.otmap.quantile import QuantileMap, histogram
from wire.protocol import Envelope


class OTMapParticipant(DetectorParticipant[DetectorRound]):
    family = "otmap"
    round_message = OTMapRound

    def problem(self, msg: DetectorRound) -> dict[str, int]:
        return {"n_features": len(msg.features)}

    def phases(self) -> dict[str, Callable[[Request], Envelope | None]]:
        return {**super().phases(), "histogram": self._histogram}

    def _histogram(self, req: Request) -> Envelope:
        counts = histogram(self.standardised(req.msg)).astype(np.float32)
        return req.reply(Upload(arrays={"counts": counts}), self.id)

    def settle(self, req: Request) -> None:
        self.keep_start(req)  # a round that does not sample this agent may still carry the map it needs later
        super().settle(req)

    def keep_start(self, req: Request) -> None:
        """Keep the start map a round's `init` carries (on disk: the job's, once)."""
        arrays = {k[len(START):]: v for k, v in req.msg.init.items() if k.startswith(START)}
        if arrays:
            self.store.save_arrays(f"start-{req.job}", arrays)

    def start_map(self, req: Request) -> QuantileMap | None:
        """The start map the round names (None: it names none); ValueError (NO_START) when this agent does not
        hold it."""
        digest = req.msg.start
        if digest is None:
            return None
        self.keep_start(req)
        kept = self.store.load_arrays(f"start-{req.job}")
        start = QuantileMap.from_arrays(kept) if kept else None
        if start is None or start.digest() != digest:
            raise ValueError(f"{NO_START}: round {req.round} of job {req.job} names start map {digest[:12]}, which "
                             f"this agent {'holds another than' if start else 'never received'} (it travels once, "
                             "in a round's init)")
        return start

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        """The standardised records, moved by the start map the round names (if any)."""
        start = self.start_map(req)
        X = np.empty(1, dtype=object)
        X[0] = self.standardised(req.msg)
        if start is not None:
            X[0] = start(X[0])
        return {"X": X}

    def threshold_errors(self, msg: DetectorRound, pre: Preprocessor) -> np.ndarray:
        raise ValueError("a transport-map job has no threshold phase: the mapped detector keeps its threshold")
