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
from edge_agent.sources import FLOW_FIELDS, Batch, SchemaError, batch_counts, encode_batch, select
from edge_agent.store import AgentStore
from models.encoding import FeatureEncoder, RecordSchema
from models.preprocessing import Preprocessor, signed_log1p
from models.threshold import sparse_histogram
from wire.protocol import Envelope


class TrainingBuffer:
    """The records an agent learns normal traffic from (a bounded reservoir sample), kept on disk: their
    numeric columns (NaN where unset) and their text fields (not the flow identifiers)."""

    def __init__(self, store: AgentStore, capacity: int = 50_000, seed: int = 0):
        self.store, self.capacity = store, capacity
        saved = store.load_arrays("training")
        meta = store.load_json("training", {"columns": [], "seen": 0})
        self.columns: list[str] = meta["columns"]
        self.seen: int = meta["seen"]
        self.X = saved["X"] if saved else np.zeros((0, len(self.columns)))
        self.text: dict[str, list[str | None]] = store.load_json("training-text", {})
        self.rng = np.random.default_rng(seed + self.seen)

    def add(self, batch: Batch) -> None:
        if not self.columns:
            self.columns = list(batch.columns)
            self.X = np.zeros((0, len(self.columns)))
            self.text = {f: [] for f in (batch.text or {}) if f not in FLOW_FIELDS}
        X = select(batch, self.columns)
        text = {f: list((batch.text or {}).get(f, [None] * len(X))) for f in self.text}
        room = self.capacity - len(self.X)
        if room > 0:
            self.X = np.vstack([self.X, X[:room]])
            for f in self.text:
                self.text[f] += text[f][:room]
        for i in range(max(room, 0), len(X)):
            j = self.rng.integers(0, self.seen + i + 1)  # reservoir sampling: a uniform sample of all records
            if j < self.capacity:
                self.X[j] = X[i]
                for f in self.text:
                    self.text[f][j] = text[f][i]
        self.seen += len(X)

    def save(self) -> None:
        self.store.save_arrays("training", {"X": self.X})
        self.store.save_json("training-text", self.text)
        self.store.save_json("training", {"columns": self.columns, "seen": self.seen})

    def batch(self) -> Batch:
        return Batch(self.columns, self.X, text={f: np.array(v, dtype=object) for f, v in self.text.items()})

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
    def training(self, meta: dict[str, Any]) -> Batch:
        """The records the model is fitted on (a family may hold some out)."""
        if not self.buffer.seen:
            raise SchemaError("no training records yet: give --train FILE (CSV or Zeek log), or let the agent "
                              "learn from the traffic it reads (--learn; on by default with --zeek)")
        return self.buffer.batch()

    def records(self, meta: dict[str, Any]) -> np.ndarray:
        """The training records in the model's columns: after the statistics phase, encoded as the job agreed
        (models.encoding; NaN where a number is unset), before it, the job's numeric features."""
        batch = self.training(meta)
        if meta.get("encoding"):
            return encode_batch(batch, FeatureEncoder.from_dict(meta["encoding"]))
        return select(batch, meta["features"])

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

    @staticmethod
    def log_mask(meta: dict[str, Any], d: int) -> np.ndarray:
        """Which columns get signed log1p: the job's (after the statistics phase), else every numeric one."""
        if "log_mask" in meta:
            return np.asarray(meta["log_mask"], dtype=bool)
        return np.full(d, bool(meta.get("log_transform", True)))

    def transformed(self, X: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
        return signed_log1p(X, self.log_mask(meta, X.shape[1]))

    def preprocessor(self, env: Envelope) -> Preprocessor:
        features = env.meta["features"]
        return Preprocessor(features, self.log_mask(env.meta, len(features)), env.arrays["mean"], env.arrays["scale"],
                            encoding=env.meta.get("encoding"))

    def imputed(self, env: Envelope) -> np.ndarray:
        """The transformed training records with unset values at the global mean (as the coordinator's
        statistics assume)."""
        T = self.transformed(self.records(env.meta), env.meta)
        missing = np.isnan(T)
        if missing.any():
            T[missing] = np.broadcast_to(env.arrays["mean"], T.shape)[missing]
        return T

    def _stats(self, env: Envelope) -> Envelope:
        """Count, and per numeric feature the sum and sum of squares of its set values and how many are set
        (transformed); the counts of every text value and unset number (models.encoding) in the meta."""
        spec_schema = RecordSchema(list(env.meta["features"]), list(env.meta.get("categorical", [])),
                                   list(env.meta.get("flags", [])))
        batch = self.training(env.meta)
        T = self.transformed(select(batch, spec_schema.numeric), env.meta)
        present = ~np.isnan(T)
        return Envelope("stats", env.job, env.round, self.id,
                        {"count": np.array([len(T)], dtype=np.int64), "total": np.nansum(T, axis=0),
                         "sumsq": np.nansum(T**2, axis=0), "present": present.sum(axis=0).astype(np.int64),
                         **self.stats_extra(env.meta)},
                        {"counts": batch_counts(batch, spec_schema)})

    def threshold_extras(self, env: Envelope, errors: np.ndarray) -> dict[str, np.ndarray]:
        """Arrays a family adds to the threshold reply."""
        return {}

    def _threshold(self, env: Envelope) -> Envelope:
        errors = self.threshold_errors(env, self.preprocessor(env))
        bins, counts = sparse_histogram(errors)
        return Envelope("histogram", env.job, env.round, self.id,
                        {"bins": bins, "counts": counts, **self.threshold_extras(env, errors)})
