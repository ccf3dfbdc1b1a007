"""The edge agent: takes part in training rounds, scores its own traffic, publishes alerts.

One thread reads the traffic source and processes queued broker messages; paho's network thread only
decodes topics and hands messages over. Everything the agent must not lose (training records, the
algorithm's client state, the model, the position in a followed log, undelivered alerts) is on disk
under --state-dir, so a restart continues where it stopped.

Alerts are delivered exactly once: the alerts a batch of records raised, the position past that batch and
the rate limiter's counts are written in one transaction (edge_agent.store.Outbox); an alert leaves the
outbox only when the coordinator says it stored it (an "ack" message on the agent's ack topic), and is
sent again every RESEND_AFTER seconds until then; the coordinator skips an alert id it already has.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from edge_agent.detector_participant import TrainingBuffer
from edge_agent.feedback import DeviceFeedback
from edge_agent.memory import import_numpy_random, release
from edge_agent.participant import Participant
from edge_agent.scorer import Scorer
from edge_agent.sources import Batch, SchemaError, Source, ZeekFollower, as_source, csv_source, take_rows
from edge_agent.store import AgentStore, Outbox
from edge_agent.zeek_input import MAX_LINE
from models.core.messages import Decline, RoundMessage
from models.detection.threshold import holdout_mask
from models.families import FAMILIES, LEGACY_JOBS, family
from wire.messages import envelope, read
from wire.mqtt import NOT_AUTHORISED_HINT, PUBLISHED, make_client, redact_url, unreachable_because
from wire.protocol import (
    ABILITIES,
    JOB_SUBSCRIPTION,
    Envelope,
    ProtocolError,
    agent_topic,
    alert_batches,
    decode,
    model_topic,
)

log = logging.getLogger("fedsentry.agent")

#: the share of its training records a device calibrates its threshold on (the mixture's held-out share)
CALIBRATION_HOLDOUT = 0.2
#: records held while no model can score them (read before the first model, or after a refused one)
WAITING_LIMIT = 100_000
PROBLEM_REPEAT = 60.0  # seconds between repeats of the same broker problem in the log
RELEASE_EVERY = 2.0  # seconds between returns of freed heap memory to the system (edge_agent.memory.release)
#: how often a learning agent writes its training reservoir to its state folder (seconds)
LEARN_SAVE_EVERY = 30.0
RESEND_AFTER = 10.0  # seconds without the coordinator's confirmation before an alert is sent again
RESEND_BATCH = 1000  # alerts sent per pass over the outbox (the outbox drains over successive passes)


class Participants(dict[str, Participant]):
    """The agent's part in each job family it has data for (models.families), built at the family's first job:
    a family's participant, algorithms and settings are imported only when a job of that family comes (an agent
    that trains and scores with a mixture never imports the PCA and recommendation algorithms)."""

    def __init__(self, agent_id: str, store: AgentStore, data: dict[str, tuple[Any, ...]]):
        super().__init__()
        self.agent_id, self.store, self.data = agent_id, store, data

    def families(self) -> list[str]:
        """The families this agent takes part in (whether or not one of their jobs came yet)."""
        return sorted(self.data)

    def __missing__(self, name: str) -> Participant:
        if name not in self.data:
            raise KeyError(name)
        import_numpy_random()  # every family's training draws from it: imported without what it does not use
        participant: Participant = family(name).load_participant()(self.agent_id, self.store, *self.data[name])
        self[name] = participant
        return participant

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self or name in self.data else default


@dataclass
class AgentConfig:
    agent_id: str
    broker: str
    state_dir: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never in a log line or traceback
    tls: bool = False
    ca_cert: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    model_job: str | None = None  # only score with models promoted by this job
    wait_for_model: bool = False  # hold the traffic source until a model is there
    exit_after_replay: bool = False  # stop once the source is exhausted and every alert is delivered
    scores_out: str | None = None  # evaluation only: every record's score (and label, if the file has one)
    calibrate: bool = False  # per-device threshold: the own quantile of held-out training records' scores
    learn: bool = False  # keep a reservoir sample of the traffic it reads as its training records
    alert_burst: int = 20
    alert_window: float = 60.0
    memory_budget: float | None = None  # MiB the process may use through a training job: sizes the buffer
    feedback_training: bool = False  # consent: records analysts mark as false positives join the training buffer


class Agent:
    def __init__(self, cfg: AgentConfig, source: Source | Iterator[Batch] | None = None,
                 training: Iterator[Batch] | None = None, ratings: tuple[Any, Any] | None = None):
        self.cfg = cfg
        self.store = AgentStore(cfg.state_dir)
        self.buffer = TrainingBuffer(self.store, budget_mib=cfg.memory_budget)
        if training is not None and self.buffer.seen == 0:
            for b in training:
                self.buffer.add(b)
            if self.buffer.seen == 0:
                raise SchemaError("the training file holds no records (expected a CSV with numeric columns, or a "
                                  "Zeek log with a #fields header or JSON lines)")
            self.buffer.save()
        self.rest()
        # the job families this agent has data for (models.families): every family that learns from records, and
        # with a ratings shard those that learn from ratings; each participant is built at its family's first job
        data: dict[str, tuple[Any, ...]] = {"records": (self.buffer,)}
        if ratings is not None:
            data["ratings"] = tuple(ratings)
        local = {name: data[f.data] for name, f in FAMILIES.items() if f.data in data}
        self.participants = Participants(cfg.agent_id, self.store, local)
        self.job_families: dict[str, str] = {}  # job -> its family, from its round messages (private mode's shares)
        self.routed_waiting: dict[str, bytes] = {}  # shares routed for a job whose round message has not come yet
        self.scorer = Scorer(cfg.agent_id, cfg.alert_burst, cfg.alert_window)
        #: analysts' false-positive feedback, applied to every model's threshold (edge_agent.feedback)
        self.feedback = DeviceFeedback(self.store, cfg.feedback_training)
        self.scorer.on_flagged = self.feedback.kept.add
        # models this device's source cannot score (job, version): never loaded again; the last model that
        # scored a batch is kept to fall back on
        self.refused: list[list[Any]] = self.store.load_json("refused-models", [])
        self.model_status: dict[str, Any] = {}
        self.waiting: list[Batch] = []  # records read before any model could score them (bounded)
        self._learn_saved = time.monotonic()
        self.last_refused: dict[str, Any] = {}
        self.connected = threading.Event()
        saved = self.store.load_bytes("model.bin")
        if saved:
            try:
                self.load_model(decode(saved), persist=False)
            except (KeyError, ValueError, ProtocolError) as e:
                log.warning("agent=%s saved model unusable: %s", cfg.agent_id, e)
        self.outbox = Outbox(Path(cfg.state_dir) / "outbox.sqlite")
        self.scorer.limiter.restore(self.outbox.load_state("limiter"))
        self.source = as_source(source)
        position = self.outbox.load_state("source") or self.outbox.load_state("zeek")  # (the key of older agents)
        if self.source is not None and position:
            self.source.seek(position)  # saved with the alerts of the last batch read (older agents: zeek.json)
        self._saved_position = None if self.source is None else self.source.position
        self.inbox: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self._next_resend = 0.0
        self._next_release = 0.0
        self.stop = threading.Event()
        self.counters = {"records": 0, "missing": 0, "alerts": 0, "rejected": 0, "rounds": 0}
        status_off = Envelope("status", "", 0, cfg.agent_id, {}, {"online": False}).encode()
        self.client, _ = make_client(cfg.agent_id, cfg.broker, cfg.username, cfg.password, cfg.tls, cfg.ca_cert,
                                     cfg.certfile, cfg.keyfile, will=(self.topic("status"), status_off, 1, True))
        self.client.on_connect = self._on_connect
        self.client.on_connect_fail = self._on_connect_fail
        self._last_problem = ("", 0.0)
        self.client.on_message = lambda c, u, m: self.inbox.put((m.topic, bytes(m.payload)))
        self.client.on_disconnect = lambda *a: self.connected.clear()
        self._scores = open(cfg.scores_out, "a") if cfg.scores_out else None  # noqa: SIM115 (closed in run)

    def load_model(self, env: Envelope, persist: bool = True) -> None:
        """Score with this model from now on; with --calibrate, at this device's own threshold. A model this
        device refused before is not loaded again. `persist`: write it where a restart loads it from (model.bin;
        its envelope is not kept in memory, 0.6 MiB for the default mixture)."""
        if [env.job, int(env.meta.get("version", 0))] in self.refused:
            log.warning("agent=%s model job=%s version=%s was refused before: kept the current one",
                        self.cfg.agent_id, env.job, env.meta.get("version"))
            return
        self.scorer.load(env, fit=self.fit_to_device if self.buffer.seen else None)
        self.apply_feedback(publish=False)
        self.report_model("loaded")
        if self.buffer.seen:
            self.rest()  # the training records go back to disk (when not learning) and their memory to the system
        if persist:
            self.store.save_bytes("model.bin", env.encode())

    def fit_to_device(self) -> None:
        """The loaded model made this device's own, from its training records (read a block at a time, from
        disk when they are parked: edge_agent.detector_participant.TrainingBuffer.blocks): a mixture's own
        components, from the records it trained on (training records without the model's columns: the fleet's
        components), and its threshold, from the scores of those it held out: shrunk toward the fleet's (a model
        publishing the fleet's tail), or with --calibrate its own quantile."""
        detector = self.scorer.detector
        tail = getattr(detector, "tail_", None)
        held = holdout_mask(self.buffer.count(), CALIBRATION_HOLDOUT if self.cfg.calibrate else
                            tail.holdout if tail is not None else 0.0)

        def records(part: np.ndarray) -> Iterator[Batch]:
            """The training records where `part` is set, a block of the buffer at a time."""
            start = 0
            for block in self.buffer.blocks():
                rows = part[start: start + len(block.X)]
                start += len(block.X)
                if rows.any():
                    yield take_rows(block, rows)

        with contextlib.suppress(SchemaError):  # records without the model's columns: the fleet's threshold
            personalise = getattr(detector, "personalise", None)
            if personalise is not None:
                personalise(self.scorer.matrix(b) for b in records(~held))
            if detector is not None:  # the range explanations show expected values within
                detector.see(self.scorer.matrix(b) for b in records(np.ones(len(held), bool)))
            if self.cfg.calibrate:
                threshold = self.scorer.calibrate(records(held))
                log.info("agent=%s calibrated threshold %.4g (federation's %.4g) on %d held-out records",
                         self.cfg.agent_id, threshold, self.scorer.federation_threshold, int(held.sum()))
            elif tail is not None and held.any():
                threshold = self.scorer.shrink(records(held))
                log.info("agent=%s threshold %.4g (federation's %.4g, shrunk toward it from %d held-out records)",
                         self.cfg.agent_id, threshold, self.scorer.federation_threshold, int(held.sum()))

    def rest(self) -> None:
        """After training work: an agent that does not learn from its traffic lets go of its training records
        (read again from disk by the next round), and freed memory goes back to the system, so that between jobs
        it scores in as little memory as it can (edge_agent.memory)."""
        if not self.cfg.learn:
            self.buffer.park()
        release()

    def topic(self, what: str) -> str:
        return agent_topic(self.cfg.agent_id, what)

    def _on_connect_fail(self, client, userdata) -> None:
        b = self._address()
        self._connection_problem(unreachable_because(*b))

    def _connection_problem(self, why: str) -> None:
        """Say why the broker cannot be used, with its address: at once, then every PROBLEM_REPEAT seconds while
        the same reason lasts (paho retries with a back-off; a log line each time would flood a device's log)."""
        last, at = self._last_problem
        if why != last or time.monotonic() - at > PROBLEM_REPEAT:
            log.error("agent=%s cannot use the broker %s: %s", self.cfg.agent_id, redact_url(self.cfg.broker), why)
            self._last_problem = (why, time.monotonic())

    # -- broker callbacks (network thread) ------------------------------------------------------------
    def _on_connect(self, client, userdata, flags, reason_code, properties=None) -> None:
        if reason_code.is_failure:
            hint = NOT_AUTHORISED_HINT if str(reason_code) in ("Not authorized", "Bad user name or password") else ""
            self._connection_problem(f"the broker refused the connection: {reason_code}" + (f"; {hint}" if hint
                                                                                            else ""))
            return
        self._last_problem = ("", 0.0)
        client.subscribe([(JOB_SUBSCRIPTION, 1), (model_topic(), 1), (self.topic("ack"), 1),
                          (self.topic("feedback"), 1), (self.topic("secagg"), 1)])
        client.publish(self.topic("status"), self._status().encode(), qos=1, retain=True)
        self.connected.set()
        self.inbox.put(("__resend__", b""))

    # -- work (agent thread) ------------------------------------------------------------------------
    def handle(self, topic: str, payload: bytes) -> None:
        if topic == "__resend__":
            self._resend(force=True)
            return
        if not payload:  # a cleared retained message (a job that ended)
            return
        try:
            env = decode(payload)
        except ProtocolError as e:
            self.counters["rejected"] += 1
            log.warning("agent=%s rejected message on %s: %s", self.cfg.agent_id, topic, e)
            return
        if env.kind == "ack" and topic == self.topic("ack"):
            self._confirmed(env)
        elif env.kind == "feedback" and topic == self.topic("feedback"):
            try:
                self.feedback.accept(env)
            except ProtocolError as e:
                self.counters["rejected"] += 1
                log.warning("agent=%s refused the analysts' feedback (kept what it had): %s", self.cfg.agent_id, e)
                return
            self.apply_feedback()
        elif env.kind == "routed" and topic == self.topic("secagg"):
            self._routed(env, payload)
        elif env.kind == "model":
            if self.cfg.model_job and env.job != self.cfg.model_job:
                return
            if self.scorer.detector is not None and (env.job, env.meta.get("version")) == (
                    self.scorer.model_job, self.scorer.model_version):
                return  # the coordinator publishes the promoted model again now and then: this one is loaded
            try:
                self.load_model(env)
            except (KeyError, ValueError, SchemaError) as e:
                self.counters["rejected"] += 1
                log.warning("agent=%s rejected model: %s", self.cfg.agent_id, e)
                return
            self._score_waiting()  # what was read before this model: scored now, not with the next record
            log.info("agent=%s model job=%s version=%s loaded", self.cfg.agent_id, env.job, env.meta.get("version"))
        elif env.kind == "round":
            try:
                header = read(RoundMessage, env)  # the part every family's round message shares
            except ProtocolError as e:
                self.counters["rejected"] += 1
                log.warning("agent=%s refused a round message of job=%s: %s", self.cfg.agent_id, env.job, e)
                return
            participant = self.participants.get(header.type or LEGACY_JOBS[0])
            if participant is None:
                return  # a job of a kind this agent has no data for
            self.job_families[env.job] = header.type or LEGACY_JOBS[0]
            if env.job in self.routed_waiting:
                self._routed(decode(self.routed_waiting.pop(env.job)), b"")
            try:
                reply = participant.on_round(env)
            except (KeyError, ValueError) as e:  # includes SchemaError: the data lacks the job's features
                self.counters["rejected"] += 1
                log.error("agent=%s cannot take part in job=%s round=%s: %s", self.cfg.agent_id, env.job,
                          env.round, e)
                if header.asks(self.cfg.agent_id):  # the coordinator records why
                    decline = envelope(Decline(reason=str(e)[:300]), env.job, env.round, self.cfg.agent_id)
                    self.client.publish(self.topic("upload"), decline.encode(), qos=1)
                return
            finally:
                self.rest()
            if reply is not None:
                self.counters["rounds"] += 1
                self.client.publish(self.topic("upload"), reply.encode(), qos=1)

    def _routed(self, env: Envelope, payload: bytes) -> None:
        """Private mode: the shares routed to this device for a secure sum's upload step; its masked upload. Shares
        that come before the job's round message (after a restart) wait for it."""
        name = self.job_families.get(env.job)
        if name is None:
            self.routed_waiting[env.job] = payload
            return
        try:
            reply = self.participants[name].on_routed(env)
        except (KeyError, ValueError) as e:
            self.counters["rejected"] += 1
            log.error("agent=%s cannot upload to the secure sum of job=%s round=%s: %s", self.cfg.agent_id, env.job,
                      env.round, e)
            decline = envelope(Decline(reason=str(e)[:300]), env.job, env.round, self.cfg.agent_id)
            self.client.publish(self.topic("upload"), decline.encode(), qos=1)
            return
        if reply is not None:
            self.client.publish(self.topic("upload"), reply.encode(), qos=1)

    def handle_safely(self, topic: str, payload: bytes) -> None:
        """One message; whatever breaks its handler beyond the errors `handle` expects (a bug, the runtime) is
        logged and counted, and the agent goes on: a round it could not answer is a dropout for the coordinator,
        the next one is answered. Before, the exception ended the agent's worker thread for good."""
        try:
            self.handle(topic, payload)
        except Exception:
            self.counters["errors"] = self.counters.get("errors", 0) + 1
            log.exception("agent=%s: handling a message on %s failed (continuing)", self.cfg.agent_id, topic)

    def _confirmed(self, env: Envelope) -> None:
        """The coordinator stored (or, for a malformed alert, refused for good) these alerts."""
        stored, refused = env.meta.get("stored", []), env.meta.get("refused", [])
        if not (isinstance(stored, list) and isinstance(refused, list)):
            return
        if refused:
            log.error("agent=%s the coordinator refused %d alerts for good (see its rejections)",
                      self.cfg.agent_id, len(refused))
        self.outbox.done(*(str(i) for i in stored + refused))

    def _resend(self, force: bool = False) -> None:
        """Alerts the coordinator has not confirmed after RESEND_AFTER seconds (all of them after a
        reconnect), RESEND_BATCH at a time; the rest on the next passes, one per second."""
        if not self.connected.is_set() or (not force and time.monotonic() < self._next_resend):
            return
        self._next_resend = time.monotonic() + 1.0
        due = self.outbox.due(time.time() - (0 if force else RESEND_AFTER), RESEND_BATCH)
        if due:
            self._publish_alerts([decode(payload) for _, payload in due])

    def _publish_alerts(self, envelopes: list[Envelope]) -> None:
        """Alerts (one envelope each, as the outbox keeps them) sent in batches per model version: under
        a flood, one message and one acknowledgement per batch (wire.protocol.alert_batches)."""
        groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for env in envelopes:
            groups.setdefault((env.job, env.round), []).append(env.meta)
        for (job, version), alerts in groups.items():
            for batch in alert_batches(job, version, self.cfg.agent_id, alerts):
                info = self.client.publish(self.topic("alerts"), batch.encode(), qos=1)
                if info.rc == PUBLISHED:
                    self.outbox.sent(*(a["id"] for a in batch.meta["alerts"]))

    def commit(self, alerts: list[dict[str, Any]]) -> None:
        """Alerts raised, the source's position past the records that raised them and the rate limiter's
        counts: one transaction, then the alerts are sent."""
        envelopes = [self.scorer.envelope(a) for a in alerts]
        state: dict[str, Any] = {"limiter": self.scorer.limiter.state()}
        position = self.source.position if self.source is not None else None
        if position is not None:
            state["source"] = self._saved_position = position
        self.outbox.add(*((env.meta["id"], env.encode()) for env in envelopes), state=state)
        self.counters["alerts"] += len(envelopes)
        if envelopes and self.connected.is_set():
            self._publish_alerts(envelopes)

    def _save_position(self) -> None:
        """The source moved on without a record to score (it read past lines it refused): its position is
        saved, so that a restart does not read them again."""
        if self.source is not None and self.source.position != self._saved_position:
            self.commit([])

    def apply_feedback(self, publish: bool = True) -> None:
        """The analysts' feedback applied to the model in use (edge_agent.feedback), its effect in the status."""
        report = self.feedback.apply(self.scorer, self.buffer)
        if report is None:
            return
        log.info("agent=%s threshold %.4g after %d false-positive actions (%.4g before feedback, cap %.4g)",
                 self.cfg.agent_id, report["threshold"], len(report["actions"]), report["base"], report["cap"])
        self.rest()
        if publish and self.connected.is_set():
            self.client.publish(self.topic("status"), self._status().encode(), qos=1, retain=True)

    def report_model(self, status: str, reason: str = "") -> None:
        """This device's model status (loaded, scoring; the last model it refused and why), in its retained
        status message: the coordinator keeps it per device, the API and dashboard show it."""
        current = {"job": self.scorer.model_job, "version": self.scorer.model_version, "status": status}
        if status == "refused":
            self.last_refused = {**current, "reason": reason[:300]}
            current = {"job": "", "version": 0, "status": "none"}
        self.model_status = {**current, **({"refused": self.last_refused} if self.last_refused else {})}
        if self.connected.is_set():
            self.client.publish(self.topic("status"), self._status().encode(), qos=1, retain=True)

    def _status(self) -> Envelope:
        return Envelope("status", "", 0, self.cfg.agent_id, {}, {
            "online": True, "records": self.buffer.seen, "jobs": self.participants.families(),
            "abilities": list(ABILITIES),
            "features": self.buffer.columns[:1000],  # a job that names none trains on those its agents share
            **({"model": self.model_status} if self.model_status else {}),
            **({"feedback": self.feedback.report} if self.feedback.report else {})})

    def refuse_model(self, reason: str) -> None:
        """The promoted model needs what this device's source cannot supply: refuse it for good (reported to
        the coordinator) and fall back on the last model that scored here, or on none."""
        job, version = self.scorer.model_job, self.scorer.model_version
        log.error("agent=%s refused model job=%s version=%s: %s", self.cfg.agent_id, job, version, reason)
        self.refused.append([job, version])
        self.store.save_json("refused-models", self.refused)
        self.report_model("refused", reason)
        good = self.store.load_bytes("model-good.bin")
        self.scorer.detector = None
        if good:
            env = decode(good)
            if [env.job, int(env.meta.get("version", 0))] not in self.refused:
                self.scorer.load(env)
                self.apply_feedback(publish=False)
                self.store.save_bytes("model.bin", good)
                self.report_model("loaded")
                log.info("agent=%s back on model job=%s version=%s", self.cfg.agent_id, env.job,
                         env.meta.get("version"))

    def learn(self, batch: Batch) -> None:
        """Add what the source delivered to the training reservoir (a uniform sample of everything read, at
        most its capacity), saved at most every LEARN_SAVE_EVERY seconds and when the agent stops."""
        self.buffer.add(batch)
        if time.monotonic() - self._learn_saved > LEARN_SAVE_EVERY:
            self.buffer.save()
            self._learn_saved = time.monotonic()

    def ingest(self, batch: Batch) -> None:
        if self.cfg.learn:
            self.learn(batch)
        self._score(batch)

    def _score(self, batch: Batch) -> None:
        if self.scorer.detector is None:
            self._wait(batch)
            return
        try:
            X = self.scorer.matrix(batch)
        except SchemaError as e:
            self.refuse_model(str(e))
            self._score(batch)
            return
        if self.model_status.get("status") != "scoring":  # the first batch this model scored here
            self.store.save_bytes("model-good.bin", self.store.load_bytes("model.bin") or b"")
            self.report_model("scoring")
        self._score_waiting()
        # unset values (e.g. Zeek's "-") are taken at the global mean by the model's preprocessing
        self.counters["missing"] += int(np.isnan(X).sum())
        scores, alerts = self.scorer.score(X, batch)
        if self._scores:
            labels = batch.labels if batch.labels is not None else np.full(len(scores), np.nan)
            threshold = self.scorer.detector.threshold_ if self.scorer.detector is not None else float("nan")
            self._scores.writelines(f"{s:.9g},{lab:g},{threshold:.9g}\n" for s, lab in zip(scores, labels))
            self._scores.flush()
        self.commit(alerts)
        self.counters["records"] += len(X)  # counted once its alerts are committed

    def _score_waiting(self) -> None:
        if self.waiting and self.scorer.detector is not None:
            held, self.waiting = self.waiting, []
            self.counters["waiting"] = 0
            for b in held:
                self._score(b)

    def _wait(self, batch: Batch) -> None:
        """Hold records read before a model can score them (at most WAITING_LIMIT; beyond, the oldest are
        dropped and counted), and move the source's position on."""
        self.waiting.append(batch)
        held = sum(len(b.X) for b in self.waiting)
        while held > WAITING_LIMIT and len(self.waiting) > 1:
            dropped = self.waiting.pop(0)
            held -= len(dropped.X)
            self.counters["dropped"] = self.counters.get("dropped", 0) + len(dropped.X)
        self.counters["waiting"] = held
        self.commit([])

    def _next_batch(self) -> Batch | Literal[False] | None:
        """A batch, None if nothing now, False when the source is exhausted."""
        if self.source is None:
            return False
        return self.source.poll()  # the position is saved with the batch's alerts (commit)

    def run(self) -> int:
        self.client.connect_async(*self._address())
        self.client.loop_start()
        exhausted = False
        try:
            while not self.stop.is_set():
                idle = exhausted or (self.cfg.wait_for_model and self.scorer.detector is None)
                try:  # with no traffic to read, sleep on the inbox: many idle agents cost no CPU
                    topic, payload = self.inbox.get(timeout=0.25 if idle else 0.002)
                    self.handle_safely(topic, payload)
                    continue
                except queue.Empty:
                    pass
                self._resend()
                if time.monotonic() > self._next_release:  # scoring's freed memory back to the system
                    release()
                    self._next_release = time.monotonic() + RELEASE_EVERY
                if self.scorer.limiter.suppressed:
                    summary = self.scorer.limiter.flush()
                    if summary:  # a closed window's summary leaves on time, not with the next flagged record
                        self.commit(summary)
                if idle:
                    if exhausted and self.cfg.exit_after_replay:
                        pending = self.scorer.limiter.flush(force=True)  # the last incident updates
                        if pending:
                            self.commit(pending)
                        elif len(self.outbox) == 0:
                            break
                    continue
                b = self._next_batch()
                if b is False:
                    exhausted = True
                    log.info("agent=%s source done: %s", self.cfg.agent_id, json.dumps(self.counters))
                elif b is None:
                    self._save_position()
                    time.sleep(0.2)
                else:
                    self.ingest(b)
        finally:
            if self.cfg.learn:
                self.buffer.save()
            self.feedback.kept.save()
            if self.connected.is_set():  # a clean stop sends no last will: say goodbye ourselves
                off = Envelope("status", "", 0, self.cfg.agent_id, {}, {"online": False})
                self.client.publish(self.topic("status"), off.encode(), qos=1, retain=True).wait_for_publish(2)
            self.client.disconnect()
            self.client.loop_stop()
            if self._scores:
                self._scores.close()
        return 0

    def _address(self) -> tuple[str, int]:
        from wire.mqtt import parse_broker_url

        b = parse_broker_url(self.cfg.broker)
        return b.host, b.port


def training_source(path: str | None, label_column: str | None = None) -> Iterator[Batch] | None:
    """The records of a training file: a Zeek log (TSV with #-headers, or JSON lines) or a CSV."""
    if not path:
        return None
    with open(path, "rb") as f:
        first = f.readline(MAX_LINE).lstrip()
    if first.startswith((b"#", b"{")):
        return zeek_file(path)
    return csv_source(path, label_column=label_column)


def zeek_file(path: str) -> Iterator[Batch]:
    """Every record of a Zeek log, read once; ZeekLineError for a record with the wrong number of columns."""
    follower = ZeekFollower(path, strict=True)
    while (batch := follower.poll()) is not None:
        yield batch
