"""An agent's part in an anomaly-detection job, whatever its model family (the round loop itself is
`edge_agent.participant`):

- ``stats``: send count, sum and sum of squares of the transformed training records;
- ``threshold``: send a histogram of the errors of the records the family takes its threshold from.

`edge_agent.pca_participant` and `edge_agent.mixture_participant` add the client data of their algorithm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edge_agent.participant import Participant
from edge_agent.sources import Batch, select
from edge_agent.store import AgentStore
from models.preprocessing import Moments, Preprocessor, signed_log1p
from models.threshold import sparse_histogram
from wire.protocol import Envelope


class TrainingBuffer:
    """The records an agent learns normal traffic from (a bounded reservoir sample), kept on disk."""

    def __init__(self, store: AgentStore, capacity: int = 50_000, seed: int = 0):
        self.store, self.capacity = store, capacity
        saved = store.load_arrays("training")
        meta = store.load_json("training", {"columns": [], "seen": 0})
        self.columns: list[str] = meta["columns"]
        self.seen: int = meta["seen"]
        self.X = saved["X"] if saved else np.zeros((0, len(self.columns)))
        self.rng = np.random.default_rng(seed + self.seen)

    def add(self, batch: Batch) -> None:
        if not self.columns:
            self.columns = list(batch.columns)
            self.X = np.zeros((0, len(self.columns)))
        X = select(batch, self.columns)
        room = self.capacity - len(self.X)
        if room > 0:
            self.X = np.vstack([self.X, X[:room]])
        for i, row in enumerate(X[max(room, 0):], start=self.seen + max(room, 0)):
            j = self.rng.integers(0, i + 1)  # reservoir sampling keeps a uniform sample of all records
            if j < self.capacity:
                self.X[j] = row
        self.seen += len(X)

    def save(self) -> None:
        self.store.save_arrays("training", {"X": self.X})
        self.store.save_json("training", {"columns": self.columns, "seen": self.seen})

    def matrix(self, features: list[str]) -> np.ndarray:
        return select(Batch(self.columns, self.X), features)


class DetectorParticipant(Participant):
    extra_arrays = ("mean", "scale", "weights")

    def __init__(self, agent_id: str, store: AgentStore, buffer: TrainingBuffer):
        super().__init__(agent_id, store)
        self.buffer = buffer

    def phases(self) -> dict[str, Callable[[Envelope], Envelope | None]]:
        return {"stats": self._stats, "threshold": self._threshold}

    # -- what a family decides ----------------------------------------------------------------------------
    def records(self, meta: dict[str, Any]) -> np.ndarray:
        """The raw records the model is fitted on, in the job's feature order."""
        return self.buffer.matrix(meta["features"])

    def threshold_errors(self, env: Envelope, pre: Preprocessor) -> np.ndarray:
        """The errors whose histogram sets the threshold, under the final model."""
        raise NotImplementedError

    def stats_extra(self, meta: dict[str, Any]) -> dict[str, np.ndarray]:
        """Arrays a family adds to the statistics reply."""
        return {}

    # -- shared ---------------------------------------------------------------------------------------------
    def weight(self, env: Envelope) -> float:
        """The weight the coordinator gives this device (its record count, capped: models.screening)."""
        return float(env.arrays["weights"][env.meta["sampled"].index(self.id)])

    def transformed(self, X: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
        return signed_log1p(X, np.full(X.shape[1], bool(meta.get("log_transform", True))))

    def preprocessor(self, env: Envelope) -> Preprocessor:
        features = env.meta["features"]
        mask = np.full(len(features), bool(env.meta.get("log_transform", True)))
        return Preprocessor(features, mask, env.arrays["mean"], env.arrays["scale"])

    def _stats(self, env: Envelope) -> Envelope:
        n, total, sumsq = Moments.of(self.transformed(self.records(env.meta), env.meta)).summary()
        return Envelope("stats", env.job, env.round, self.id,
                        {"count": np.array([n], dtype=np.int64), "total": total, "sumsq": sumsq,
                         **self.stats_extra(env.meta)})

    def _threshold(self, env: Envelope) -> Envelope:
        bins, counts = sparse_histogram(self.threshold_errors(env, self.preprocessor(env)))
        return Envelope("histogram", env.job, env.round, self.id, {"bins": bins, "counts": counts})
