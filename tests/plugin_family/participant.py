"""The agent side of the plug-in family: its records' count, then the algorithm's client step on them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edge_agent.detector_participant import TrainingBuffer
from edge_agent.participant import Participant, Request
from edge_agent.store import AgentStore
from models.core.federated import State
from tests.plugin_family.model import MeanRound, RecordCount
from wire.protocol import Envelope


class MeanParticipant(Participant):
    family = "fleetmean"
    round_message = MeanRound

    def __init__(self, agent_id: str, store: AgentStore, buffer: TrainingBuffer):
        super().__init__(agent_id, store)
        self.buffer = buffer

    def phases(self) -> dict[str, Callable[[Request], Envelope | None]]:
        return {"stats": self._stats}

    def problem(self, msg: MeanRound) -> dict[str, int]:
        return {"n_features": len(msg.features)}

    def client_data(self, req: Request) -> State:
        return {"X": self.buffer.matrix(list(req.msg.features))[None]}

    def _stats(self, req: Request) -> Envelope | None:
        if not req.msg.asks(self.id):
            return None
        return req.reply(RecordCount(count=np.array([float(self.buffer.seen)])), self.id)
