"""The coordinator side of the plug-in family: stats (record counts), then `rounds` averaging rounds."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from coordinator.job_runner import JobRunner, Phase
from models.core.messages import MessageType, Upload
from models.core.pipeline import close_round
from tests.plugin_family.model import MeanJobSpec, MeanRound, RecordCount
from wire.protocol import ProtocolError


class MeanJob(JobRunner):
    type = "fleetmean"
    replies: ClassVar[dict[str, MessageType]] = {"stats": RecordCount, "train": Upload}

    spec: MeanJobSpec

    def content(self, phase: str, header: dict[str, Any]) -> MeanRound:
        return MeanRound(**header, features=self.spec.features, params=self.spec.algorithm_params,
                         broadcast={} if phase == "stats" else dict(self.broadcast))

    def phase_table(self) -> list[Phase]:
        return [Phase("stats"), Phase("train", self.spec.rounds, sampled=True)]

    def validate(self, msg: Any, sender: str) -> None:
        if isinstance(msg, RecordCount):
            if msg.count.shape != (1,) or not msg.count[0] >= 0:
                raise ProtocolError("value", "a record count is one number >= 0")
            return
        want = {"sum": (len(self.spec.features),), "count": ()}
        if {k: v.shape for k, v in msg.arrays.items()} != want:
            raise ProtocolError("shape", f"expected {want}")

    def close(self, answered: list[str]) -> dict[str, Any]:
        if self.phase == "stats":
            if not answered:
                self.fail("no agent answered the statistics phase")
                return {}
            self.participants = answered
            self.counts = [float(self.pending[a].count[0]) for a in answered]
            self.roster_saved = False
            self.rng = np.random.default_rng(self.spec.seed)
            self.server, self.broadcast = self.algorithm().init_server(len(answered), self.rng)
            return {"records": sum(self.counts)}
        if answered:
            uploads = {k: np.stack([self.pending[a].arrays[k] for a in answered]) for k in ("sum", "count")}
            ids, weights = self.weights(answered)
            self.server, self.broadcast = close_round(self.algorithm(), self.server, ids, uploads, weights)
        return {"mean": self.broadcast["mean"].tolist()}
