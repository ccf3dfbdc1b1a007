"""Scoring traffic with the promoted model and turning flagged records into alerts.

Alerts are rate-limited per device: at most ``burst`` individual alerts per ``window`` seconds; past that,
flagged records are grouped into incidents whose updates leave every second, each carrying every record it
counts whole (time, score, flow fields, explanation): the budget limits notifications, never what is stored.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_agent.sources import Batch, encode_batch, flows, select, take_rows
from models.detection.encoding import FeatureEncoder
from models.detection.threshold import device_threshold, shrunk_threshold
from wire.feedback import model_key
from wire.model import Detector, detector_from_envelope
from wire.protocol import RECORDS_BYTES, RECORDS_PER_UPDATE, Envelope

#: how often an incident's newly flagged records leave the device (seconds): on a timer, never waiting for
#: more traffic
INCIDENT_FLUSH = 1.0
#: flows kept as examples per incident update
INCIDENT_SAMPLES = 5


def incident_key(alert: dict[str, Any]) -> str:
    """What groups flagged records into one incident: the features that explain most of them (the top two
    of the explanation, in order of name)."""
    features = sorted(str(e.get("feature", "")) for e in (alert.get("explanation") or [])[:2])
    return "+".join(features) or "unexplained"


@dataclass
class RateLimiter:
    """At most ``burst`` individual alerts per ``window`` seconds; past that, flagged records are grouped into
    **incidents** (device, the features that explain them, the window) and every record is counted and kept: an
    incident update (count, first and last seen, the worst record with its explanation, a few example flows,
    and every record it counts, `records`) leaves every INCIDENT_FLUSH seconds while the incident grows, and at
    once when its records reach RECORDS_PER_UPDATE or RECORDS_BYTES (so a flood, or a backlog scored at
    promotion, leaves as many updates as it needs, never more records in memory than that per incident). Its
    state is part of the agent's reading state (saved with the alerts a batch raised) and runs on the wall
    clock, so a restart neither forgets flagged records nor resets the window."""

    burst: int = 20
    window: float = 60.0
    started: float = field(default_factory=time.time)
    sent: int = 0
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)
    flushed: float = field(default_factory=time.time)

    @property
    def suppressed(self) -> int:
        """Flagged records counted in incidents and not sent yet."""
        return sum(int(i["count"]) for i in self.incidents.values())

    def admit(self, alert: dict[str, Any], now: float | None = None) -> list[dict[str, Any]]:
        """Alerts to send now: this one, incident updates that are due, both, or none."""
        now = time.time() if now is None else now
        out = self.flush(now)
        if now - self.started >= self.window or now < self.started:
            self.started, self.sent = now, 0
        if self.sent < self.burst:
            self.sent += 1
            out.append(alert)
            return out
        key = incident_key(alert)
        inc = self.incidents.get(key)
        if inc is None:
            inc = self.incidents[key] = {"count": 0, "first": alert["ts"], "last": alert["ts"], "worst": alert,
                                         "samples": [], "records": [], "bytes": 0}
        inc["count"] += 1
        inc["last"] = alert["ts"]
        if alert["score"] > inc["worst"]["score"]:
            inc["worst"] = alert
        if alert.get("flow") and len(inc["samples"]) < INCIDENT_SAMPLES:
            inc["samples"].append(alert["flow"])
        record = {"ts": alert["ts"], "score": alert["score"], "flow": alert.get("flow"),
                  "explanation": (alert.get("explanation") or [])[:3]}
        inc.setdefault("records", []).append(record)
        inc["bytes"] = int(inc.get("bytes", 0)) + len(json.dumps(record, separators=(",", ":"), default=str))
        if len(inc["records"]) >= RECORDS_PER_UPDATE or inc["bytes"] >= RECORDS_BYTES:
            out.append(self._update(key, self.incidents.pop(key)))
        return out

    def _update(self, key: str, inc: dict[str, Any]) -> dict[str, Any]:
        """One incident update: the worst record, counting the incident's new records and carrying them."""
        update = dict(inc["worst"])
        update.update(id=uuid.uuid4().hex, summary=True, count=inc["count"], ts=inc["last"],
                      incident={"key": key, "window": self.started, "first": inc["first"], "last": inc["last"],
                                "samples": inc["samples"]},
                      records=inc.get("records", []))
        return update

    def flush(self, now: float | None = None, force: bool = False) -> list[dict[str, Any]]:
        """The updates of the incidents that grew since the last flush, once INCIDENT_FLUSH seconds have
        passed (or `force`): one alert each, counting its new records."""
        now = time.time() if now is None else now
        if not self.incidents or not (force or now - self.flushed >= INCIDENT_FLUSH or now < self.flushed):
            return []
        out = [self._update(key, inc) for key, inc in self.incidents.items()]
        self.incidents, self.flushed = {}, now
        return out

    def state(self) -> dict[str, Any]:
        return {"started": self.started, "sent": self.sent, "incidents": self.incidents, "flushed": self.flushed}

    def restore(self, state: dict[str, Any] | None) -> None:
        if state:
            self.started, self.sent = float(state["started"]), int(state["sent"])
            self.incidents = dict(state.get("incidents") or {})
            self.flushed = float(state.get("flushed", self.started))


class Scorer:
    def __init__(self, agent_id: str, burst: int = 20, window: float = 60.0):
        self.id = agent_id
        self.detector: Detector | None = None
        self.encoder: FeatureEncoder | None = None
        self.model_job, self.model_version = "", 0
        self.limiter = RateLimiter(burst, window)
        #: the model's threshold made this device's own, before analysts' feedback (edge_agent.feedback) raises it
        self.base_threshold = float("nan")
        #: told of every flagged record: (model "job:version", scores, the records) (edge_agent.feedback.Kept)
        self.on_flagged: Callable[[str, np.ndarray, Batch], None] | None = None

    def load(self, env: Envelope, fit: Callable[[], None] | None = None) -> None:
        """Score with this model; `fit` makes it the device's own first (its threshold, its components), and only
        then does the scorer name the model's job and version (what the agent reports, and alerts carry)."""
        self.detector = detector_from_envelope(env)
        self.federation_threshold = self.detector.threshold_
        encoding = self.detector.preprocessor_.encoding
        self.encoder = FeatureEncoder.from_dict(encoding) if encoding else None
        if fit is not None:
            fit()
        self.model_job, self.model_version = env.job, int(env.meta["version"])
        self.base_threshold = self.detector.threshold_

    def calibrate(self, held: Iterable[Batch]) -> float:
        """Per-device calibration (`models.detection.threshold.device_threshold`): the threshold becomes this
        device's own
        quantile of the scores of `held` (batches of records the model did not train on), within a factor 2 of
        the federation's. Returns the threshold in force."""
        assert self.detector is not None
        self.detector.threshold_ = device_threshold(self.federation_threshold, self.scores_of(held),
                                                    self.detector.quantile)
        return self.detector.threshold_

    def shrink(self, held: Iterable[Batch]) -> float:
        """This device's own threshold, shrunk toward the federation's
        (`models.detection.threshold.shrunk_threshold`) from
        the scores of its held-out training records (batches), for a model that publishes the fleet's tail (a
        mixture); the federation's threshold otherwise. Returns the threshold in force."""
        assert self.detector is not None
        tail = getattr(self.detector, "tail_", None)
        if tail is not None:
            scores = self.scores_of(held)
            if len(scores):
                self.detector.threshold_ = shrunk_threshold(scores, self.federation_threshold, tail,
                                                            self.detector.quantile)
        return self.detector.threshold_

    def scores_of(self, batches: Iterable[Batch]) -> np.ndarray:
        assert self.detector is not None
        parts = [np.atleast_1d(self.detector.score_samples(self.matrix(b))) for b in batches]
        return np.concatenate(parts) if parts else np.zeros(0)

    def matrix(self, batch: Batch) -> np.ndarray:
        """A batch in the model's columns (encoded as the job agreed); SchemaError when it lacks a field."""
        assert self.detector is not None
        if self.encoder is not None:
            return encode_batch(batch, self.encoder)
        return select(batch, self.detector.feature_names_)

    def score(self, X: np.ndarray, batch: Batch | None = None) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """Scores of a batch and the alerts it raises (after rate limiting). With the batch the records came
        in, each alert carries its record's flow fields (Zeek's uid, ts, addresses, ports, proto, service;
        a CSV's line number), so that an analyst can find the connection."""
        if self.detector is None:
            return np.full(len(X), np.nan), []
        s = np.asarray(self.detector.score_samples(X))  # X is a batch: an array already
        flagged = np.flatnonzero(s > self.detector.threshold_)
        alerts: list[dict[str, Any]] = []
        if len(flagged):
            expl = self.detector.explain(X[flagged])
            flow = flows(batch, flagged) if batch is not None else [{}] * len(flagged)
            if self.on_flagged is not None and batch is not None:
                self.on_flagged(model_key(self.model_job, self.model_version), s[flagged], take_rows(batch, flagged))
            for i, e, f in zip(flagged, expl, flow):
                alert = {"id": uuid.uuid4().hex, "ts": time.time(), "score": float(s[i]),
                         "threshold": self.detector.threshold_, "explanation": e,
                         "model_version": self.model_version, "summary": False, "count": 1}
                if f:
                    alert["flow"] = f
                alerts += self.limiter.admit(alert)
        else:
            alerts += self.limiter.flush()
        return s, alerts

    def envelope(self, alert: dict[str, Any]) -> Envelope:
        return Envelope("alert", self.model_job, self.model_version, self.id, {}, alert)
