"""An agent's part in a federated PCA job (the round loop itself is `edge_agent.participant`).

- ``stats``: send count, sum and sum of squares of the transformed training records;
- ``train``: the client step on the second moment C_i of the training records around the global mean;
- ``threshold``: send a histogram of the training records' errors under the final consensus.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from edge_agent.participant import Participant
from edge_agent.sources import Batch, select
from edge_agent.store import AgentStore
from models.pca.base import PCAAlgorithm
from models.preprocessing import Moments, Preprocessor, signed_log1p
from models.robust import residuals
from models.threshold import error_histogram
from wire.protocol import Envelope

log = logging.getLogger("fedsentry.agent")


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


class PCAParticipant(Participant):
    family = "pca"
    extra_arrays = ("mean", "scale", "weights")

    def __init__(self, agent_id: str, store: AgentStore, buffer: TrainingBuffer):
        super().__init__(agent_id, store)
        self.buffer = buffer

    def phases(self) -> dict[str, Callable[[Envelope], Envelope | None]]:
        return {"stats": self._stats, "threshold": self._threshold}

    def problem(self, meta: dict[str, Any]) -> dict[str, int]:
        return {"n_features": len(meta["features"]), "rank": int(meta["rank"])}

    def algorithm(self, meta: dict[str, Any]) -> PCAAlgorithm:
        alg = super().algorithm(meta)
        if not isinstance(alg, PCAAlgorithm):  # the family registry holds only PCAAlgorithm subclasses
            raise TypeError(f"{type(alg).__name__} is not a PCAAlgorithm")
        return alg

    def _transformed(self, meta: dict) -> np.ndarray:
        X = self.buffer.matrix(meta["features"])
        return signed_log1p(X, np.full(X.shape[1], bool(meta.get("log_transform", True))))

    def client_data(self, env: Envelope) -> dict[str, np.ndarray]:
        T = self._transformed(env.meta)
        C = Moments.of(T).second_moment(env.arrays["mean"], env.arrays["scale"])
        # the weight the coordinator gives this device (its record count, capped: models.screening)
        weight = float(env.arrays["weights"][env.meta["sampled"].index(self.id)])
        return {"C": C[None], "weight": np.array([weight])}

    # -- phases ------------------------------------------------------------------------------------
    def _stats(self, env: Envelope) -> Envelope:
        n, total, sumsq = Moments.of(self._transformed(env.meta)).summary()
        return Envelope("stats", env.job, env.round, self.id,
                        {"count": np.array([n], dtype=np.int64), "total": total, "sumsq": sumsq})

    def _threshold(self, env: Envelope) -> Envelope:
        Z = self.algorithm(env.meta).consensus(self.broadcast(env))
        features = env.meta["features"]
        mask = np.full(len(features), bool(env.meta.get("log_transform", True)))
        pre = Preprocessor(features, mask, env.arrays["mean"], env.arrays["scale"])
        X = pre.transform(self.buffer.matrix(env.meta["features"]))
        counts = error_histogram(residuals(X, Z))
        nz = np.flatnonzero(counts)
        return Envelope("histogram", env.job, env.round, self.id,
                        {"bins": nz.astype(np.int32), "counts": counts[nz].astype(np.int64)})
