"""An agent's part in a federated PCA job: the client side of every phase, over envelopes.

Phases, driven by the coordinator's retained round message (meta ``phase``):

- ``stats``: send count, sum and sum of squares of the transformed training records;
- ``train``: if sampled, run the algorithm's client step (the same function the simulator calls) on the
  second moment C_i around the global mean and upload; a client that took part in an earlier round first
  applies its dual update with the consensus the message carries (once: the pending flag is cleared);
- ``threshold``: send a histogram of the training records' errors under the final consensus.

Rounds are idempotent: the reply to a (job, round) is cached and re-sent unchanged if the same round
arrives again, so a redelivered message never applies a step twice.
"""

from __future__ import annotations

import logging

import numpy as np

from edge_agent.sources import Batch, select
from edge_agent.store import AgentStore
from models.pca import make_algorithm
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


class PCAParticipant:
    def __init__(self, agent_id: str, store: AgentStore, buffer: TrainingBuffer):
        self.id, self.store, self.buffer = agent_id, store, buffer

    def on_round(self, env: Envelope) -> Envelope | None:
        meta = env.meta
        phase = meta.get("phase")
        cached = self.store.load_bytes(f"reply-{env.job}-{phase}-{env.round}.bin")
        if cached is not None:
            from wire.protocol import decode

            return decode(cached)
        if phase == "stats":
            reply = self._stats(env)
        elif phase == "train":
            reply = self._train(env)
        elif phase == "threshold":
            reply = self._threshold(env)
        else:
            return None
        if reply is not None:
            self.store.save_bytes(f"reply-{env.job}-{phase}-{env.round}.bin", reply.encode())
        return reply

    # -- phases ------------------------------------------------------------------------------------
    def _transformed(self, meta: dict) -> np.ndarray:
        X = self.buffer.matrix(meta["features"])
        return signed_log1p(X, np.full(X.shape[1], bool(meta.get("log_transform", True))))

    def _stats(self, env: Envelope) -> Envelope:
        n, total, sumsq = Moments.of(self._transformed(env.meta)).summary()
        return Envelope("stats", env.job, env.round, self.id,
                        {"count": np.array([n], dtype=np.int64), "total": total, "sumsq": sumsq})

    def _algorithm(self, meta: dict):
        return make_algorithm(meta["algorithm"], len(meta["features"]), int(meta["rank"]), **meta.get("params", {}))

    def _client_data(self, env: Envelope) -> dict[str, np.ndarray]:
        T = self._transformed(env.meta)
        C = Moments.of(T).second_moment(env.arrays["mean"], env.arrays["scale"])
        weight = len(T) / float(env.meta["mean_count"])
        return {"C": C[None], "weight": np.array([weight])}

    def _train(self, env: Envelope) -> Envelope | None:
        alg = self._algorithm(env.meta)
        broadcast = {k: v for k, v in env.arrays.items() if k not in ("mean", "scale") and not k.startswith("init.")}
        name = f"job-{env.job}"
        state = self.store.load_arrays(name)
        if state is not None:
            state = alg.client_finish(state, broadcast)  # the dual step of the last round taken part in
            self.store.save_arrays(name, state)
        if self.id not in env.meta.get("sampled", []):
            return None
        data = self._client_data(env)
        if state is None:
            init = {k[5:]: v for k, v in env.arrays.items() if k.startswith("init.")}
            state = alg.init_clients(data, init or broadcast)
        state, upload = alg.client_update(state, data, broadcast)
        self.store.save_arrays(name, state)
        return Envelope("upload", env.job, env.round, self.id, {k: v[0] for k, v in upload.items()})

    def _threshold(self, env: Envelope) -> Envelope:
        alg = self._algorithm(env.meta)
        broadcast = {k: v for k, v in env.arrays.items() if k not in ("mean", "scale") and not k.startswith("init.")}
        Z = alg.consensus(broadcast)
        features = env.meta["features"]
        mask = np.full(len(features), bool(env.meta.get("log_transform", True)))
        pre = Preprocessor(features, mask, env.arrays["mean"], env.arrays["scale"])
        X = pre.transform(self.buffer.matrix(env.meta["features"]))
        counts = error_histogram(residuals(X, Z))
        nz = np.flatnonzero(counts)
        return Envelope("histogram", env.job, env.round, self.id,
                        {"bins": nz.astype(np.int32), "counts": counts[nz].astype(np.int64)})
