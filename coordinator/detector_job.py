"""What every anomaly-detection job does on the coordinator, whatever its model family:

    stats      every participant sends count / sum / sum of squares -> the global standardisation and
               each device's capped weight (models.detection.screening)
    train      the family's rounds (a seeded sample uploads its client step; the algorithm aggregates)
    threshold  every participant sends a histogram of its errors -> the label-free threshold
    finished   the model version is stored and promoted (the coordinator then publishes it, retained)

A family (`coordinator.pca_job`, `coordinator.mixture_job`) says what its algorithm is given after the
statistics phase, what an upload looks like, what a round reports, which records a device histograms and
how the finished detector is built.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np

from coordinator.job_runner import Phase
from coordinator.private_detector import PrivateDetector
from models.core.messages import MessageType, Upload
from models.core.pipeline import CAP_LEVEL, close_round
from models.detection.encoding import check_counts, encoded_statistics
from models.detection.messages import DetectorRound, Histogram, Statistics
from models.detection.preprocessing import Preprocessor
from models.detection.screening import (
    Federation,
    capped_counts,
    capped_weights,
    check_histogram,
    check_summary,
    federation_statistics,
    robust_threshold,
    value_bound,
    weight_caps,
)
from models.detection.spec import DetectorJobSpec
from models.params import SettingError
from store.db import ModelVersion, pack, unpack
from wire.model import Detector, stored_envelope
from wire.protocol import ProtocolError, expect_arrays, expect_shapes

log = logging.getLogger("fedsentry.coordinator")

MAX_UPLOAD_NORM = 1e8


class DetectorJob(PrivateDetector):
    replies: ClassVar[dict[str, MessageType]] = {"stats": Statistics, "train": Upload, "threshold": Histogram}
    #: fields of the family's statistics message that are record counts (the mixture's held-out count)
    stats_counts: ClassVar[tuple[str, ...]] = ()
    #: fields of the family's histogram message that are one number each (the mixture's held-out log-likelihood)
    threshold_extras: ClassVar[tuple[str, ...]] = ()

    spec: DetectorJobSpec

    @classmethod
    def model_payload(cls, mv: ModelVersion) -> bytes | None:
        return stored_envelope(mv.job_id, mv.version, unpack(mv.arrays), dict(mv.info)).encode()

    def settle(self, announced: dict[str, tuple[str, ...]]) -> str | None:
        """A job that names no features trains on the numeric features every participant announces (in the
        first one's order), stored with the job's settings so that a restart keeps them."""
        if self.spec.features:
            return None
        silent = [p for p in self.participants if not announced.get(p)]
        if silent:
            return (f"the job names no features and {', '.join(silent[:3])} did not announce theirs (an older agent, "
                    "or one without training records): name them (--features, \"features\")")
        first = announced[self.participants[0]]
        shared = [f for f in first if all(f in announced[p] for p in self.participants)]
        try:
            self.spec.with_features(shared)
        except SettingError as e:
            return f"the features the agents share ({', '.join(shared) or 'none'}) do not make a job: {e}"
        params = self.spec.to_dict()
        params.pop("algorithm")
        self.set_job(params=params)
        log.info("job=%s trains on the %d features its %d agents share: %s", self.job_id, len(shared),
                 len(self.participants), ", ".join(shared))
        return None

    def algorithm(self) -> Any:
        """The job's algorithm over the encoded features (known after the statistics phase)."""
        return self.spec.make_algorithm(n_features=len(self.info.get("features") or self.spec.features))

    # -- what a family decides ------------------------------------------------------------------------
    def start_algorithm(self, fed: Federation, counts: np.ndarray, total: np.ndarray, sumsq: np.ndarray) -> None:
        """Set up the server state after the statistics phase (self.server, self.broadcast)."""
        raise NotImplementedError

    def expected_upload(self) -> dict[str, tuple[int, ...]]:
        """The shapes of an upload in the current round."""
        raise NotImplementedError

    def round_metrics(self, before: dict[str, np.ndarray]) -> dict[str, Any]:
        """What a closed training round reports, given the broadcast before it (the algorithm's refusal counters
        as they moved in this round, which devices they moved for and why, and whatever the family adds)."""
        out: dict[str, Any] = {f"{name}_uploads": int(float(self.server.get(key, 0))
                                                     - self._counters_before.get(key, 0.0))
                               for key, name in self.counters.items()}
        influence: dict[str, dict[str, str]] = {}
        for key, (kind, why) in self.counter_influence.items():
            for i in np.asarray(self.server.get(f"{key}_ids", ()), dtype=int):
                influence.setdefault(kind, {})[self.participants[i]] = why
        if influence:
            out["influence"] = influence
        return out

    #: server counters of uploads the algorithm refused or shrank -> the round metric's name (without _uploads)
    counters: ClassVar[dict[str, str]] = {"rejected": "implausible", "shrunk": "shrunk"}
    #: the same counters -> what the operator sees for each device they moved for (models.influence)
    counter_influence: ClassVar[dict[str, tuple[str, str]]] = {
        "rejected": ("refused", "statistics no honest device could send (beyond the bounds its statistics "
                                "phase set, or not positive semi-definite)"),
        "shrunk": ("capped", "upload scaled down to the size its statistics phase admits")}

    def histogram_count(self, sender: str) -> float:
        """How many records a device's threshold histogram must hold."""
        return float(self.counts[self.index()[sender]])

    def threshold_from(self, histograms: list[tuple[np.ndarray, np.ndarray]], weights: np.ndarray) -> float:
        guard = self.spec.guard()
        return robust_threshold(histograms, weights, self.spec.quantile, guard.device_trim, guard.colluders)

    def detector(self, pre: Preprocessor, threshold: float) -> Detector:
        """The finished model (raises ValueError when it must not be promoted)."""
        raise NotImplementedError

    #: the family's round message (models.detection.messages.DetectorRound or a subclass)
    round_message: ClassVar[type[DetectorRound]] = DetectorRound

    # -- rounds ---------------------------------------------------------------------------------------
    def reply_type(self, phase: str) -> MessageType | None:
        return self.private_reply(phase) if self.sums_only() else super().reply_type(phase)

    def content(self, phase: str, header: dict[str, Any]) -> DetectorRound:
        if self.sums_only():
            return self.private_content(phase, header)
        common = {**header, "params": self.spec.algorithm_params, "rank": self.spec.rank,
                  "log_transform": self.spec.log_transform, **self.round_fields()}
        if phase == "stats":
            return self.round_message(**common, features=self.spec.features, categorical=self.spec.categorical,
                                      flags=self.spec.flags)
        return self.round_message(**common, features=self.info["features"], encoding=self.info["encoding"],
                                  log_mask=self.info["log_mask"], broadcast=dict(self.broadcast), init=self.initial(),
                                  mean=np.array(self.info["mean"]), scale=np.array(self.info["scale"]),
                                  **({} if phase == "threshold" else self.weight_fields()))

    def weight_fields(self) -> dict[str, Any]:
        """What a training round tells the devices of their weights: each sampled device's, as capped (in `sampled`
        order), or, when the round lists nobody (above models.core.sampling's switch), the job's caps, each device
        capping the records it counted in the statistics phase itself (the same arithmetic)."""
        if self.draw is None:
            return {"weights": self.weights(self.sampled)[1]}
        caps = weight_caps(np.array(self.counts, dtype=float), self.spec.guard())
        return {"cap_level": caps.level, "cap_scale": caps.scale}

    def follow(self) -> None:
        if self.sums_only():
            self.private_follow()
        else:
            super().follow()

    def phase_table(self) -> list[Phase]:
        return [Phase("stats"), Phase("train", self.spec.rounds, sampled=True), Phase("threshold")]

    def device_weights(self, counts: np.ndarray) -> np.ndarray:
        return capped_weights(counts, self.spec.guard())

    def initial(self) -> dict[str, np.ndarray]:
        return unpack(bytes.fromhex(self.info.get("init_blob", "")))

    # -- replies --------------------------------------------------------------------------------------
    def validate(self, msg: Any, sender: str) -> None:
        """Nothing a device claims is taken on trust (models.detection.screening): sums that real records could
        have, an upload of the algorithm's shape with finite values, a histogram of exactly the records
        it claimed, on the agreed grid."""
        if self.sums_only():
            self.private_validate(msg, sender)
        elif isinstance(msg, Statistics):
            d = len(self.spec.features)
            expect_shapes("statistics", {"count": (msg.count, (1,)), "total": (msg.total, (d,)),
                                         "sumsq": (msg.sumsq, (d,)), "present": (msg.present, (d,)),
                                         **{k: (getattr(msg, k), (1,)) for k in self.stats_counts}})
            n = float(msg.count[0])
            if not ((msg.present >= 0) & (msg.present <= n)).all():
                raise ProtocolError("value", "present counts must be between 0 and the record count")
            problem = check_summary(n, msg.total.astype(float), msg.sumsq.astype(float), self.spec.guard(),
                                    value_bound(self.spec.log_transform), msg.present.astype(float))
            if problem:
                raise ProtocolError("value", problem)
            try:
                reported = check_counts(msg.counts, self.spec.schema())
            except ValueError as e:
                raise ProtocolError("value", f"counts: {e}") from None
            if reported["n"] != n or any(reported["numeric"][f]["present"] != int(p)
                                       for f, p in zip(self.spec.features, msg.present)):
                raise ProtocolError("value", "counts disagree with the statistics' record and present counts")
            for k in self.stats_counts:
                if not 0 <= float(getattr(msg, k)[0]) <= self.spec.max_records:
                    raise ProtocolError("value", f"{k} must be a count between 0 and {self.spec.max_records}")
        elif isinstance(msg, Histogram):
            for k in self.threshold_extras:
                v = getattr(msg, k)
                if v.shape != (1,) or not abs(float(v[0])) < 1e12:
                    raise ProtocolError("value", f"{k} must be one finite number")
            problem = check_histogram(msg.bins, msg.counts, self.histogram_count(sender))
            if problem:
                raise ProtocolError("value", problem)
        else:
            expect_arrays(msg.arrays, self.expected_upload(), max_norm=MAX_UPLOAD_NORM)

    # -- closing rounds -------------------------------------------------------------------------------
    def close(self, answered: list[str]) -> dict[str, Any]:
        if self.sums_only():
            return self.private_close(answered)
        if self.phase == "stats":
            return self.close_stats(answered)
        if self.phase == "threshold":
            return {"threshold": self.close_threshold(answered)}
        return self.close_train(answered)

    def close_stats(self, answered: list[str]) -> dict[str, Any]:
        if not answered:
            self.fail("no agent answered the statistics phase")
            return {}
        self.participants = answered
        a: list[Statistics] = [self.pending[p] for p in answered]
        try:
            encoded = encoded_statistics(self.spec.schema(), [x.counts for x in a],
                                         np.stack([x.total for x in a]).astype(float),
                                         np.stack([x.sumsq for x in a]).astype(float),
                                         np.stack([x.present for x in a]).astype(float))
        except ValueError as e:
            self.fail(f"the devices' statistics do not agree on a feature encoding: {e}")
            return {}
        counts, total, sumsq = encoded.count, encoded.total, encoded.sumsq
        fed = federation_statistics(counts, total, sumsq, self.spec.guard())
        enc = encoded.encoder
        log_mask = np.r_[np.full(len(enc.numeric), self.spec.log_transform), np.zeros(enc.n_features - len(enc.numeric),
                                                                                       bool)]
        self.info = {"features": enc.feature_names, "mean": fed.mean.tolist(), "scale": fed.scale.tolist(),
                     "encoding": enc.to_dict(), "log_mask": log_mask.astype(int).tolist(),
                     **{k: [float(getattr(x, k)[0]) for x in a] for k in self.stats_counts}}
        self.counts, self.roster_saved = counts.tolist(), False
        self.rng = np.random.default_rng(self.spec.seed)
        self.start_algorithm(fed, counts, total, sumsq)
        self.server.update(fed.caps.state())  # the pipeline's cap stage: claimed records -> capped weights
        self.info["init_blob"] = pack(self.broadcast).hex()
        counted = capped_counts(counts, self.spec.guard())
        # capped: its share of the weight cut by more than 1 % (equal devices of a small fleet share exactly)
        capped = np.flatnonzero(counted / counted.sum() < 0.99 * counts / counts.sum())
        out: dict[str, Any] = {"records": int(counts.sum()), "weight_capped": len(capped)}
        if len(capped):
            out["influence"] = {"capped": {answered[i]: f"weight capped: {int(counts[i])} records claimed, counted "
                                           f"as {counted[i]:.0f}" for i in capped}}
        return out

    def close_train(self, answered: list[str]) -> dict[str, Any]:
        self._counters_before = {k: float(self.server.get(k, 0)) for k in self.counters}
        for k in self.counters:  # which devices this round's refusals are for (set by the algorithm's update)
            self.server.pop(f"{k}_ids", None)
        alg = self.algorithm()
        ids, _ = self.weights(answered)
        if CAP_LEVEL not in self.server:  # a job saved before the caps were a pipeline stage
            self.server.update(weight_caps(np.array(self.counts, dtype=float), self.spec.guard()).state())
        uploads = {k: np.stack([self.pending[a].arrays[k] for a in answered]) for k in
                   (self.pending[answered[0]].arrays if answered else {})}  # Upload messages
        before = self.broadcast
        # the answers weigh the records their devices claimed; the pipeline caps them
        claimed = np.array(self.counts, dtype=float)[ids]
        self.server, self.broadcast = close_round(alg, self.server, ids, uploads, claimed)
        if self.touched is not None:
            for k, rows in alg.touched(self.server, ids).items():
                self.touched[k] = np.union1d(self.touched.get(k, rows[:0]), rows)
        return self.round_metrics(before)

    def close_threshold(self, answered: list[str]) -> float:
        if not answered:
            self.fail("no agent answered the threshold phase")
            return float("nan")
        _, weights = self.weights(answered)
        histograms = [(self.pending[a].bins, self.pending[a].counts) for a in answered]
        try:
            threshold = self.threshold_from(histograms, weights)
        except ValueError as e:
            self.fail(f"no threshold: {e}")
            return float("nan")
        pre = Preprocessor(self.info["features"], np.array(self.info["log_mask"], bool), np.array(self.info["mean"]),
                           np.array(self.info["scale"]), encoding=self.info["encoding"])
        self.store_model(pre, threshold, self.model_info(answered, weights))
        return threshold

    def store_model(self, pre: Preprocessor, threshold: float, extra: dict[str, Any]) -> None:
        """The finished detector as the job's next model version (promoted when the job finishes), or the job
        failed when it fails its sanity check."""
        try:
            arrays, info = self.detector(pre, threshold).to_wire()
        except ValueError as e:
            self.fail(f"the model failed its sanity check and is not promoted: {e}")
            return
        with self.sessions.begin() as s:
            self.fence(s)
            version = s.query(ModelVersion).filter_by(job_id=self.job_id).count() + 1
            s.add(ModelVersion(job_id=self.job_id, version=version, type=self.type, round=self.spec.rounds,
                               arrays=pack(arrays), info={**info, **extra}, published=False))
        self.info["threshold"] = threshold

    def model_info(self, answered: list[str], weights: np.ndarray) -> dict[str, Any]:
        """What a family records with the model version from the threshold replies, besides the threshold."""
        return {}

    def finish(self) -> None:
        from coordinator.models_service import promote

        with self.sessions() as s:
            mv = s.query(ModelVersion).filter_by(job_id=self.job_id).order_by(ModelVersion.version.desc()).first()
        promote(self.sessions, mv.id)
        self.phase = "finished"
        self.set_job(status="finished", phase="finished")
        log.info("job=%s finished: threshold=%.4g", self.job_id, self.info.get("threshold", float("nan")))
