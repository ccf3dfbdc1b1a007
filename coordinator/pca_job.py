"""A federated PCA job on the coordinator.

    stats      every participant sends count / sum / sum of squares -> the global standardisation
    train 1..R a seeded sample uploads its client step; the algorithm's server step aggregates
    threshold  every participant sends an error histogram -> the label-free threshold
    finished   the model version is stored and promoted (the coordinator then publishes it, retained)
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, cast

import numpy as np

from coordinator.db import ModelVersion, pack, unpack
from coordinator.job_runner import JobRunner
from models.linalg import subspace_distance
from models.pca import PCAAlgorithm
from models.pca.spec import PCAJobSpec
from models.preprocessing import Preprocessor
from models.screening import (
    capped_weights,
    check_histogram,
    check_summary,
    federation_statistics,
    model_problem,
    robust_threshold,
    value_bound,
)
from wire.model import model_envelope
from wire.protocol import Envelope, ProtocolError, expect_arrays

log = logging.getLogger("fedsentry.coordinator")

MAX_UPLOAD_NORM = 1e8


class PCAJob(JobRunner):
    type = "pca"
    replies: ClassVar[dict[str, str]] = {"stats": "stats", "train": "upload", "threshold": "histogram"}

    spec: PCAJobSpec

    @classmethod
    def model_payload(cls, mv: ModelVersion) -> bytes | None:
        a = unpack(mv.arrays)
        pre = Preprocessor(mv.info["features"], a["log_mask"].astype(bool), a["mean"], a["scale"])
        return model_envelope(mv.job_id, mv.version, a["Z"], pre, mv.info["threshold"]).encode()

    def algorithm(self) -> PCAAlgorithm:
        return cast(PCAAlgorithm, self.spec.make_algorithm())

    def content(self, phase: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        meta = {"rank": self.spec.rank, "params": self.spec.algorithm_params, "log_transform": self.spec.log_transform}
        if phase == "stats":
            return {}, {**meta, "features": self.spec.features}
        arrays = {**self.broadcast, **{f"init.{k}": v for k, v in self.initial().items()},
                  "mean": np.array(self.info["mean"]), "scale": np.array(self.info["scale"])}
        if phase == "train":  # each sampled device's weight, as capped here (in the order of `sampled`)
            arrays["weights"] = self.weights(self.sampled)[1]
        return arrays, {**meta, "features": self.info["features"]}

    def device_weights(self, counts: np.ndarray) -> np.ndarray:
        return capped_weights(counts, self.spec.guard())

    def initial(self) -> dict[str, np.ndarray]:
        return unpack(bytes.fromhex(self.info.get("init_blob", "")))

    def follow(self) -> None:
        rounds = self.spec.rounds
        if self.phase == "stats" or (self.phase == "train" and self.round < rounds):
            self.sample("train", self.round + 1)
        elif self.phase == "train":
            self.begin("threshold", rounds + 1, self.participants)
        elif self.phase == "threshold":
            self.finish()

    # -- replies --------------------------------------------------------------------------------------
    def validate(self, env: Envelope) -> None:
        """Nothing a device claims is taken on trust (models.screening): sums that real records could
        have, an upload of the algorithm's shape with finite values, a histogram of exactly the records
        it claimed, on the agreed grid."""
        if self.phase == "stats":
            d = len(self.spec.features)
            expect_arrays(env, {"count": (1,), "total": (d,), "sumsq": (d,)})
            a = env.arrays
            if any(a[k].dtype.kind not in "fiu" for k in a):
                raise ProtocolError("dtype", "statistics must be real numbers")
            problem = check_summary(float(a["count"][0]), a["total"].astype(float), a["sumsq"].astype(float),
                                    self.spec.guard(), value_bound(self.spec.log_transform))
            if problem:
                raise ProtocolError("value", problem)
        elif self.phase == "train":
            expect_arrays(env, {k: v.shape for k, v in self.expected_upload().items()}, max_norm=MAX_UPLOAD_NORM)
        else:
            bins, counts = env.arrays.get("bins"), env.arrays.get("counts")
            if bins is None or counts is None or set(env.arrays) != {"bins", "counts"}:
                raise ProtocolError("shape", "a histogram is the arrays bins and counts")
            problem = check_histogram(bins, counts, self.counts[self.index()[env.sender]])
            if problem:
                raise ProtocolError("value", problem)

    def expected_upload(self) -> dict[str, np.ndarray]:
        """The upload a client would send (shapes only matter), from the algorithm itself."""
        alg = self.algorithm()
        data = {"C": np.eye(len(self.info["features"]))[None], "weight": np.ones(1)}
        _, up = alg.client_update(alg.init_clients(data, self.broadcast), data, self.broadcast)
        return {k: v[0] for k, v in up.items()}

    # -- closing rounds -------------------------------------------------------------------------------
    def close(self, answered: list[str]) -> dict[str, Any]:
        if self.phase == "stats":
            return self.close_stats(answered)
        if self.phase == "train":
            return self.close_train(answered)
        return {"threshold": self.close_threshold(answered)}

    def close_stats(self, answered: list[str]) -> dict[str, Any]:
        if not answered:
            self.fail("no agent answered the statistics phase")
            return {}
        self.participants = answered
        a = [self.pending[p].arrays for p in answered]
        counts = np.array([float(x["count"][0]) for x in a])
        fed = federation_statistics(counts, np.stack([x["total"] for x in a]).astype(float),
                                    np.stack([x["sumsq"] for x in a]).astype(float), self.spec.guard())
        self.info = {"features": list(self.spec.features), "mean": fed.mean.tolist(), "scale": fed.scale.tolist()}
        self.counts, self.roster_saved = counts.tolist(), False
        self.rng = np.random.default_rng(self.spec.seed)
        alg = self.algorithm()
        self.server, self.broadcast = alg.init_server(len(answered), self.rng)
        self.info["init_blob"] = pack(self.broadcast).hex()
        self.server = alg.attach_bounds(self.server, fed.diag, fed.trace)
        return {"records": int(counts.sum()), "weight_capped": int(np.count_nonzero(fed.weight < counts / counts.mean()
                                                                                     * (1 - 1e-9)))}

    def close_train(self, answered: list[str]) -> dict[str, Any]:
        alg = self.algorithm()
        ids, weights = self.weights(answered)
        uploads = {k: np.stack([self.pending[a].arrays[k] for a in answered]) for k in
                   (self.pending[answered[0]].arrays if answered else {})}
        before = alg.consensus(self.broadcast)
        refused, shrunk = float(self.server.get("rejected", 0)), float(self.server.get("shrunk", 0))
        self.server, self.broadcast = alg.server_update(self.server, ids, uploads, weights)
        if self.touched is not None:
            for k, rows in alg.touched(self.server, ids).items():
                self.touched[k] = np.union1d(self.touched.get(k, rows[:0]), rows)
        # how far the consensus moved: a convergence signal that needs nobody's data
        return {"subspace_change": subspace_distance(alg.consensus(self.broadcast), before),
                "implausible_uploads": int(float(self.server.get("rejected", 0)) - refused),
                "shrunk_uploads": int(float(self.server.get("shrunk", 0)) - shrunk)}

    def close_threshold(self, answered: list[str]) -> float:
        if not answered:
            self.fail("no agent answered the threshold phase")
            return float("nan")
        _, weights = self.weights(answered)
        histograms = [(self.pending[a].arrays["bins"], self.pending[a].arrays["counts"]) for a in answered]
        threshold = robust_threshold(histograms, weights, self.spec.quantile, self.spec.device_trim)
        features = self.info["features"]
        pre = Preprocessor(features, np.full(len(features), self.spec.log_transform),
                           np.array(self.info["mean"]), np.array(self.info["scale"]))
        Z = self.algorithm().consensus(self.broadcast)
        problem = model_problem(Z, pre.mean, pre.scale, threshold)
        if problem:
            self.fail(f"the model failed its sanity check and is not promoted: {problem}")
            return threshold
        with self.sessions.begin() as s:
            version = s.query(ModelVersion).filter_by(job_id=self.job_id).count() + 1
            s.add(ModelVersion(job_id=self.job_id, version=version, type="pca", round=self.spec.rounds,
                               arrays=pack({"Z": Z, "mean": pre.mean, "scale": pre.scale,
                                            "log_mask": pre.log_mask.astype(np.uint8)}),
                               info={"features": pre.feature_names, "threshold": threshold}, published=False))
        self.info["threshold"] = threshold
        return threshold

    def finish(self) -> None:
        from coordinator.models_service import promote

        with self.sessions() as s:
            mv = s.query(ModelVersion).filter_by(job_id=self.job_id).order_by(ModelVersion.version.desc()).first()
        promote(self.sessions, mv.id)
        self.phase = "finished"
        self.set_job(status="finished", phase="finished")
        log.info("job=%s finished: threshold=%.4g", self.job_id, self.info.get("threshold", float("nan")))
