"""The agent side of the plug-in family: its records' count, then the algorithm's client step on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edge_agent.detector_participant import TrainingBuffer
from edge_agent.participant import Participant
from edge_agent.store import AgentStore
from models.core.federated import State
from tests.plugin_family.model import RecordCount
from wire.messages import envelope
from wire.protocol import Envelope


class MeanParticipant(Participant):
    family = "fleetmean"

    def __init__(self, agent_id: str, store: AgentStore, buffer: TrainingBuffer):
        super().__init__(agent_id, store)
        self.buffer = buffer

    def phases(self) -> dict[str, Callable[[Envelope], Envelope | None]]:
        return {"stats": self._stats}

    def problem(self, meta: dict[str, Any]) -> dict[str, int]:
        return {"n_features": len(meta["features"])}

    def client_data(self, env: Envelope) -> State:
        return {"X": self.buffer.matrix(list(env.meta["features"]))[None]}

    def _stats(self, env: Envelope) -> Envelope | None:
        if self.id not in env.meta.get("sampled", ()):
            return None
        return envelope(RecordCount(count=np.array([float(self.buffer.seen)])), env.job, env.round, self.id)
