"""A federated PCA job on the coordinator: phases, rounds and their bookkeeping, no math of its own.

    stats      all participants send count / sum / sum of squares -> global standardisation
    train 1..R sample clients with the job's seeded generator, broadcast, collect uploads until every
               sampled client answered or the deadline passed, aggregate with the algorithm's server step
    threshold  all participants send error histograms -> the label-free threshold
    finished   the model version is stored and promoted (published, retained, to every agent)

After each completed round the whole resumable state (server arrays, the generator's state, the
broadcast) is written in the same transaction as the round's record, so a coordinator killed at any
moment resumes from the last completed round and samples exactly the same clients again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from coordinator.db import JobState, ModelVersion, Round, pack, unpack, utcnow
from edge_agent.protocol import Envelope, ProtocolError, expect_arrays
from models.linalg import subspace_distance
from models.pca import make_algorithm
from models.preprocessing import Preprocessor, global_standardisation
from models.threshold import EDGES, quantile_from_histogram

log = logging.getLogger("fedsentry.coordinator")

MAX_UPLOAD_NORM = 1e8


class PCAJob:
    """Drives one job. `publish(topic, payload, retain)` sends; the session factory persists."""

    def __init__(self, job, sessions, publish: Callable[[str, bytes, bool], None], job_topic: str,
                 model_topic: str):
        self.job_id = job.id
        self.params: dict[str, Any] = dict(job.params)
        self.algorithm_name = job.algorithm
        self.sessions, self.publish = sessions, publish
        self.job_topic, self.model_topic = job_topic, model_topic
        self.deadline_s = float(self.params.get("deadline", 10.0))
        self.phase = "waiting"
        self.round = 0
        self.participants: list[str] = []
        self.info: dict[str, Any] = {}
        self.server: dict[str, np.ndarray] = {}
        self.broadcast: dict[str, np.ndarray] = {}
        self.pending: dict[str, Envelope] = {}
        self.sampled: list[str] = []
        self.started_at = 0.0
        self.deadline = 0.0
        self.rng: np.random.Generator | None = None

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, online: list[str]) -> None:
        """Begin with the devices online now (or resume from the stored state)."""
        with self.sessions() as s:
            st = s.get(JobState, self.job_id)
            if st is not None:
                self._restore(st)
                log.info("job=%s resuming after round=%s phase=%s", self.job_id, self.round, self.phase)
                self._next()
                return
        need = int(self.params.get("min_agents", 1))
        if len(online) < need:
            return
        self.participants = sorted(online)[: int(self.params.get("max_agents", 10**9))]
        self._begin("stats", 0, self.participants)

    def _restore(self, st: JobState) -> None:
        self.round, self.phase, self.participants, self.info = st.round, st.phase, list(st.participants), dict(st.info)
        self.server, self.broadcast = unpack(st.server), unpack(st.broadcast)
        if "rng" in self.info:
            self.rng = np.random.default_rng()
            self.rng.bit_generator.state = self.info["rng"]

    def _algorithm(self):
        return make_algorithm(self.algorithm_name, len(self.info["features"]), int(self.params["rank"]),
                              **self.params.get("algorithm_params", {}))

    # -- rounds ---------------------------------------------------------------------------------------
    def _begin(self, phase: str, rnd: int, sampled: list[str]) -> None:
        self.phase, self.round, self.sampled = phase, rnd, sampled
        self.pending = {}
        self.started_at = time.monotonic()
        self.deadline = self.started_at + self.deadline_s
        meta = {"phase": phase, "type": "pca", "algorithm": self.algorithm_name, "rank": int(self.params["rank"]),
                "params": self.params.get("algorithm_params", {}), "sampled": sampled,
                "log_transform": bool(self.params.get("log_transform", True))}
        arrays: dict[str, np.ndarray] = {}
        if phase == "stats":
            meta["features"] = self.params["features"]
        else:
            meta.update(features=self.info["features"], mean_count=self.info["mean_count"])
            arrays.update(self.broadcast)
            arrays.update({f"init.{k}": v for k, v in unpack(self.info_blob("init")).items()})
            arrays.update(mean=np.array(self.info["mean"]), scale=np.array(self.info["scale"]))
        env = Envelope("round", self.job_id, rnd, "coordinator", arrays, meta)
        self.publish(self.job_topic, env.encode(), True)
        self._set_job(status="running", phase=phase, current_round=rnd)
        log.info("job=%s round=%s phase=%s sampled=%d", self.job_id, rnd, phase, len(sampled))

    def info_blob(self, name: str) -> bytes:
        return bytes.fromhex(self.info.get(f"{name}_blob", ""))

    def _next(self) -> None:
        """Start what follows the last completed round."""
        rounds = int(self.params["rounds"])
        if self.phase == "stats" or (self.phase == "train" and self.round < rounds):
            self._train_round(self.round + 1)
        elif self.phase == "train":
            self._begin("threshold", rounds + 1, self.participants)
        elif self.phase == "threshold":
            self._finish()

    def _train_round(self, rnd: int) -> None:
        N = len(self.participants)
        per_round = max(1, round(float(self.params["fraction"]) * N))
        idx = np.sort(self.rng.choice(N, per_round, replace=False))
        self._begin("train", rnd, [self.participants[i] for i in idx])

    # -- messages -------------------------------------------------------------------------------------
    def accept(self, env: Envelope) -> None:
        """Validate a reply for this job; raise ProtocolError (with a reason) to reject it."""
        if env.round < self.round:
            raise ProtocolError("stale", f"round {env.round} < current {self.round}")
        if env.round > self.round:
            raise ProtocolError("future", f"round {env.round} > current {self.round}")
        expected = {"stats": "stats", "train": "upload", "threshold": "histogram"}.get(self.phase)
        if env.kind != expected:
            raise ProtocolError("kind", f"{env.kind} during phase {self.phase}")
        if env.sender not in self.sampled:
            raise ProtocolError("not_sampled", f"{env.sender} was not asked in round {self.round}")
        if env.sender in self.pending:
            raise ProtocolError("duplicate", f"{env.sender} already answered round {self.round}")
        self._validate(env)
        self.pending[env.sender] = env

    def _validate(self, env: Envelope) -> None:
        if self.phase == "stats":
            d = len(self.params["features"])
            expect_arrays(env, {"count": (1,), "total": (d,), "sumsq": (d,)})
            if env.arrays["count"][0] < 1 or (env.arrays["sumsq"] < 0).any():
                raise ProtocolError("value", "count must be positive and sums of squares non-negative")
        elif self.phase == "train":
            shapes = {k: v.shape for k, v in self._expected_upload().items()}
            expect_arrays(env, shapes, max_norm=MAX_UPLOAD_NORM)
        else:
            bins, counts = env.arrays.get("bins"), env.arrays.get("counts")
            if bins is None or counts is None or bins.shape != counts.shape or bins.ndim != 1:
                raise ProtocolError("shape", "histogram needs bins and counts of one length")
            if len(bins) and (bins.min() < 0 or bins.max() >= len(EDGES) - 1 or (counts < 0).any()):
                raise ProtocolError("value", "histogram bins out of range or negative counts")

    def _expected_upload(self) -> dict[str, np.ndarray]:
        alg = self._algorithm()
        d = len(self.info["features"])
        C = np.eye(d)[None]
        state = alg.init_clients({"C": C, "weight": np.ones(1)}, self.broadcast)
        _, up = alg.client_update(state, {"C": C, "weight": np.ones(1)}, self.broadcast)
        return {k: v[0] for k, v in up.items()}

    def tick(self) -> bool:
        """Close the round if everyone answered or the deadline passed; True when the job is done."""
        if self.phase in ("waiting", "finished"):
            return self.phase == "finished"
        if len(self.pending) < len(self.sampled) and time.monotonic() < self.deadline:
            return False
        answered = [a for a in self.sampled if a in self.pending]
        seconds = time.monotonic() - self.started_at
        metrics: dict[str, Any] = {"sampled": len(self.sampled), "answered": len(answered),
                                   "dropouts": len(self.sampled) - len(answered)}
        if self.phase == "stats":
            self._close_stats(answered)
        elif self.phase == "train":
            metrics.update(self._close_train(answered))
        else:
            metrics["threshold"] = self._close_threshold(answered)
        self._save(Round(job_id=self.job_id, round=self.round, phase=self.phase, sampled=self.sampled,
                         answered=answered, metrics=metrics, seconds=seconds))
        if self.phase == "failed":
            return True
        self._next()
        return self.phase == "finished"

    def _close_stats(self, answered: list[str]) -> None:
        if not answered:
            self._fail("no agent answered the statistics phase")
            return
        self.participants = answered
        summaries = [(int(self.pending[a].arrays["count"][0]), self.pending[a].arrays["total"],
                      self.pending[a].arrays["sumsq"]) for a in answered]
        mean, scale, _ = global_standardisation(summaries)
        counts = np.array([s[0] for s in summaries], dtype=float)
        self.info = {"features": list(self.params["features"]), "mean": mean.tolist(), "scale": scale.tolist(),
                     "counts": counts.tolist(), "mean_count": float(counts.mean())}
        rng = np.random.default_rng(int(self.params.get("seed", 0)))
        alg = self._algorithm()
        self.server, self.broadcast = alg.init_server(len(answered), rng)
        self.info["init_blob"] = pack(self.broadcast).hex()
        self.rng = rng

    def _close_train(self, answered: list[str]) -> dict[str, float]:
        alg = self._algorithm()
        index = {a: i for i, a in enumerate(self.participants)}
        ids = np.array([index[a] for a in answered], dtype=int)
        weights = np.array(self.info["counts"])[ids] / self.info["mean_count"] if len(ids) else np.zeros(0)
        uploads = {k: np.stack([self.pending[a].arrays[k] for a in answered]) for k in
                   (self.pending[answered[0]].arrays if answered else {})}
        before = alg.consensus(self.broadcast)
        self.server, self.broadcast = alg.server_update(self.server, ids, uploads, weights)
        # how far the consensus moved: a convergence diagnostic that needs nobody's data
        return {"subspace_change": subspace_distance(alg.consensus(self.broadcast), before)}

    def _close_threshold(self, answered: list[str]) -> float:
        counts = np.zeros(len(EDGES) - 1, dtype=np.int64)
        for a in answered:
            np.add.at(counts, self.pending[a].arrays["bins"], self.pending[a].arrays["counts"])
        threshold = quantile_from_histogram(counts, float(self.params.get("quantile", 0.99)))
        alg = self._algorithm()
        pre = Preprocessor(self.info["features"], np.full(len(self.info["features"]),
                           bool(self.params.get("log_transform", True))), np.array(self.info["mean"]),
                           np.array(self.info["scale"]))
        Z = alg.consensus(self.broadcast)
        with self.sessions.begin() as s:
            version = (s.query(ModelVersion).filter_by(job_id=self.job_id).count()) + 1
            s.add(ModelVersion(job_id=self.job_id, version=version, type="pca", round=int(self.params["rounds"]),
                               arrays=pack({"Z": Z, "mean": pre.mean, "scale": pre.scale,
                                            "log_mask": pre.log_mask.astype(np.uint8)}),
                               info={"features": pre.feature_names, "threshold": threshold}))
        self.info["threshold"] = threshold
        return threshold

    def _finish(self) -> None:
        from coordinator.models_service import promote

        with self.sessions() as s:
            mv = s.query(ModelVersion).filter_by(job_id=self.job_id).order_by(ModelVersion.version.desc()).first()
        promote(self.sessions, mv.id)
        self.phase = "finished"
        self._set_job(status="finished", phase="finished")
        log.info("job=%s finished: threshold=%.4g", self.job_id, self.info.get("threshold", float("nan")))

    def _fail(self, why: str) -> None:
        self.phase = "failed"
        self._set_job(status="failed", phase="failed", error=why)
        log.error("job=%s failed: %s", self.job_id, why)

    # -- persistence ----------------------------------------------------------------------------------
    def _save(self, rnd: Round) -> None:
        if self.rng is not None:
            self.info["rng"] = self.rng.bit_generator.state
        with self.sessions.begin() as s:
            s.merge(rnd)
            s.merge(JobState(job_id=self.job_id, round=self.round, phase=self.phase, participants=self.participants,
                             info=_jsonable(self.info), server=pack(self.server), broadcast=pack(self.broadcast)))
            from coordinator.db import Device

            for a in rnd.answered:
                dev = s.get(Device, a)
                if dev is not None:
                    dev.rounds += 1
                    dev.last_seen = utcnow()

    def _set_job(self, **fields: Any) -> None:
        from coordinator.db import Job

        with self.sessions.begin() as s:
            job = s.get(Job, self.job_id)
            for k, v in fields.items():
                setattr(job, k, v)


def _jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _jsonable(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.generic):
        return o.item()
    return o
