"""The coordinator process: MQTT in, jobs driven, everything stored.

paho's network thread only queues messages; one worker thread validates them, drives the jobs, and
writes to the database. The coordinator subscribes with a persistent session (QoS 1), so uploads and
alerts sent while it was down are delivered when it comes back. One coordinator leads a job at a time:
a lease in the jobs table, renewed while it works and taken over when it lapses.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError

from coordinator import status
from coordinator.feedback import publish_feedback
from coordinator.forward import Destination, Forwarder
from coordinator.ingest import AlertIngest
from coordinator.ingest_limit import IngestLimit
from coordinator.job_runner import JobRunner, LeadershipLostError
from coordinator.models_service import publish_promoted
from coordinator.presence import PRESENCE_BATCH, PRESENCE_EVERY, Presence, status_sender
from coordinator.queue_ingest import QueueIngest, check_queue_url
from coordinator.status import StatusStore
from models.families import family, job_spec
from store import retention
from store.db import Job, Rejection, make_engine, migrate, session_factory, utcnow
from store.jobs import create_job
from store.records import insert_for
from store.singleton import Locks
from wire.mqtt import make_client, parse_broker_url
from wire.protocol import (
    AGENT_SUBSCRIPTIONS,
    DRIVER_SUBSCRIPTION,
    ProtocolError,
    agent_message,
    handed_agent_topic,
    job_topic,
)

log = logging.getLogger("fedsentry.coordinator")
LEASE = timedelta(seconds=15)
ALERT_BATCH = 2000  # alerts stored in one transaction at most
ALERT_WAIT = 0.05  # seconds an alert may wait for its batch
HOUSEKEEPING = (0.05, 1.0)  # database polling interval: after activity, and at most
MODEL_REPUBLISH = 600.0  # seconds between publications of the promoted models again (retained is per node on a cluster)
ANSWERS_READ = 0.1  # seconds between reads of the answers ingest workers stored (answers through the queue)
ELSEWHERE_READ = 0.2  # seconds between reads of the active jobs for answers to a job not led here


#: what a coordinator process does (`fedsentry coordinator --role`): a driver leads jobs (rounds, answers, promoted
#: models), an ingest worker stores alerts (forwarding, retention); both keep devices' status. Any number of each
#: may run on one database: every job, and each of forwarding, retention and publishing, has one holder at a time.
ROLES = ("driver", "ingest")
#: the agents' topics each role reads
ROLE_TOPICS = {"driver": ("status", "upload"), "ingest": ("status", "alerts")}


class Coordinator:
    def __init__(self, broker: str, db: str | None = None, client_id: str = "fedsentry-coordinator",
                 username: str | None = None, password: str | None = None, tls: bool = False,
                 ca_cert: str | None = None, retention_days: float | None = None,
                 alert_rate: float = 1000.0, alert_burst: float = 20000.0,
                 forward: list[Destination] | None = None, roles: tuple[str, ...] = ROLES,
                 queue_urls: list[str] | None = None, ingest_workers: int = 1):
        if not roles or set(roles) - set(ROLES):
            raise ValueError(f"roles must be some of {', '.join(ROLES)}, not {roles!r}")
        if ingest_workers < 1:
            raise ValueError("ingest_workers must be at least 1")
        self.client_id = client_id
        self.roles = frozenset(roles)
        #: on a RabbitMQ cluster, alerts come from a quorum queue (coordinator/queue_ingest.py), not a subscription
        self.queue = list(queue_urls or []) if "ingest" in self.roles else []
        #: and the answers to rounds too: the ingest workers store them, the driver takes them from round_uploads
        #: (coordinator/upload_queue.py); those never stored come from the workers on the drivers' topic
        self.answers_queued = bool(queue_urls) and "driver" in self.roles
        for url in queue_urls or []:
            check_queue_url(url)
        self._answers_read = 0.0
        self.retention_days = retention_days
        self._pruned = -1e9
        self.instance = f"{client_id}-{uuid.uuid4().hex[:8]}"
        self.engine = make_engine(db)
        self._connect_db()
        self.sessions = session_factory(self.engine)
        #: what one coordinator of those on this database does alone: each job, retention, publishing, forwarding
        self.locks = Locks(self.engine)
        self.inbox: queue.Queue[tuple[str, bytes, int, int]] = queue.Queue()
        self.jobs: dict[str, JobRunner] = {}
        self.rejected: Counter[str] = Counter()
        self._saved_rejections: Counter[str] = Counter()
        self._rejections_lock = threading.Lock()
        self.accepted = 0
        #: accepted answers acknowledged at the next tick, once stored
        self._upload_acks: list[tuple[int, int]] = []
        #: active jobs another coordinator leads (answers to them are theirs, not refused here)
        self.led_elsewhere: set[str] = set()
        self._elsewhere_read = 0.0
        #: the promoted models are published again every model_republish seconds
        self.model_republish, self._models_published = MODEL_REPUBLISH, time.monotonic()
        self.stop_event = threading.Event()
        self.connected = threading.Event()
        parse_broker_url(broker)
        self.client, self.broker = make_client(client_id, broker, username, password, tls, ca_cert)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = lambda *a: self.connected.clear()
        # acknowledge a message only once it is handled (alerts: once stored), so a crash loses nothing:
        # the broker redelivers what was not acknowledged
        self.client.manual_ack_set(True)
        self.client.on_message = self._on_message
        #: the devices' newest status messages, handled between alerts and uploads (coordinator/presence.py)
        self.presence = Presence(self.client.ack)
        self.statuses = StatusStore(self.sessions)
        #: alerts each device may have stored per second (more wait on the device, unconfirmed, and come again)
        #: with several ingest workers, each admits its share of a device's rate
        limit = IngestLimit(alert_rate / ingest_workers, max(1.0, alert_burst / ingest_workers))
        self.ingest = AlertIngest(self.sessions, self.publish, self.client.ack, self.reject, limit)
        self.queue_ingest = (QueueIngest(self.queue, self.sessions, self.reject, limit, ALERT_BATCH, ALERT_WAIT)
                             if self.queue else None)
        self.queue_thread: threading.Thread | None = None
        #: the effect of analysts' false-positive feedback, as devices report it (coordinator/feedback.py)
        self.thread: threading.Thread | None = None
        #: stored alerts sent on to webhooks and syslog servers, each from its own thread
        self.forwarder = (Forwarder(self.sessions, list(forward), locks=self.locks)
                          if forward and "ingest" in self.roles else None)

    def _connect_db(self) -> None:
        delay = 1.0
        while True:
            try:
                migrate(self.engine)
                return
            except OperationalError as e:
                log.error("database unreachable (%s); retrying in %.0f s", str(e.orig).strip()[:200], delay)
                time.sleep(delay)
                delay = min(delay * 2, 30)

    def _on_message(self, client: Any, userdata: Any, m: Any) -> None:
        item = (m.topic, bytes(m.payload), m.mid, m.qos)
        device = status_sender(m.topic)
        if device is not None:
            self.presence.put(device, item)
        else:
            self.inbox.put(item)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any = None) -> None:
        if reason_code.is_failure:
            log.error("broker refused the coordinator: %s", reason_code)
            return
        # with a queue, this process's alerts and statuses come from it (coordinator.queue_ingest), and a driver's
        # answers from the table the ingest workers store them in
        topics = ({t for r in self.roles for t in ROLE_TOPICS[r]} - ({"alerts", "status"} if self.queue else set())
                  - ({"upload"} if self.answers_queued else set()))
        wanted = [(topic, qos) for topic, qos in AGENT_SUBSCRIPTIONS if topic.rsplit("/", 1)[1] in topics]
        wanted += [DRIVER_SUBSCRIPTION] if self.answers_queued else []
        if wanted:  # an ingest worker reading the queue subscribes to nothing (paho refuses an empty list)
            client.subscribe(wanted)
        self.connected.set()
        log.info("coordinator connected to %s:%s", self.broker.host, self.broker.port)

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos=1, retain=retain)

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> Coordinator:
        self.client.connect_async(self.broker.host, self.broker.port)
        self.client.loop_start()
        self.thread = threading.Thread(target=self.run, name="coordinator", daemon=True)
        self.thread.start()
        if self.queue_ingest:
            self.queue_thread = threading.Thread(target=self.queue_ingest.run, args=(self.stop_event,),
                                                 name="queue-ingest", daemon=True)
            self.queue_thread.start()
        if self.forwarder:
            self.forwarder.start()
        return self

    def close(self) -> None:
        self.stop_event.set()
        for thread in (self.thread, self.queue_thread):
            if thread:
                thread.join(timeout=10)
        if self.ingest.acks:
            self.ingest.flush()
        self._flush_rejections()
        if self.forwarder:
            self.forwarder.stop()
        self.locks.close()
        self.client.disconnect()
        self.client.loop_stop()
        self.engine.dispose()

    def run(self) -> None:
        """The worker: messages as they come, alerts stored in batches (at most ALERT_WAIT old), rounds
        closed as soon as they can be (in memory), and the database polled for new jobs, cancellations and
        promotions with a back-off (HOUSEKEEPING seconds, doubling while nothing changes)."""
        next_rounds = next_housekeeping = 0.0
        interval = HOUSEKEEPING[0]
        handled = 0
        while not self.stop_event.is_set():
            try:
                try:
                    topic, payload, mid, qos = self.inbox.get(timeout=0 if self.presence.waiting() else 0.02)
                    handled += 1
                    if self.handle(topic, payload, mid, qos) != "buffered":
                        self.client.ack(mid, qos)
                except queue.Empty:
                    pass
                # statuses after alerts and uploads: when those are done, and a few every PRESENCE_EVERY
                if self.presence.waiting() and (self.inbox.empty() or handled % PRESENCE_EVERY == 0):
                    for topic, payload, mid, qos in self.presence.take(PRESENCE_BATCH):
                        self.handle(topic, payload, mid, qos)
                        self.client.ack(mid, qos)
                now = time.monotonic()
                # an empty inbox means the broker waits for our acknowledgements (its in-flight window is
                # full) or the flood is over: store now; otherwise batch up to ALERT_BATCH or ALERT_WAIT
                if self.ingest.due(self.inbox.empty(), ALERT_BATCH, ALERT_WAIT):
                    self.ingest.flush()
                if now >= next_rounds:
                    next_rounds = now + 0.02
                    self.tick()
                if now >= next_housekeeping:
                    busy = self.housekeeping()
                    interval = HOUSEKEEPING[0] if busy else min(interval * 2, HOUSEKEEPING[1])
                    next_housekeeping = time.monotonic() + interval
            except OperationalError as e:
                log.error("database error: %s", str(e.orig).strip()[:200])
                time.sleep(1)
            except Exception:  # a bug must not stop the worker: every message and job is isolated below
                log.exception("coordinator worker: unexpected error (continuing)")
                time.sleep(0.1)

    # -- jobs -----------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Store the answers accepted since the last tick and acknowledge them, then close the rounds that can be
        closed (in memory; a closed round is stored)."""
        if not self.connected.is_set():
            return
        for job_id, runner in list(self.jobs.items()):
            if runner.unsaved:
                self._isolated(job_id, runner, f"storing answers to round {runner.round}", runner.store_uploads)
        acks, self._upload_acks = self._upload_acks, []
        for mid, qos in acks:
            self.client.ack(mid, qos)
        if self.answers_queued and time.monotonic() - self._answers_read >= ANSWERS_READ:
            self._answers_read = time.monotonic()
            for job_id, runner in list(self.jobs.items()):
                if runner.phase not in ("waiting", "finished", "failed"):
                    self._isolated(job_id, runner, f"taking the stored answers to round {runner.round}",
                                   partial(self._take_stored, runner))
        for job_id, runner in list(self.jobs.items()):
            if runner.phase != "waiting" and self._isolated(job_id, runner, f"closing round {runner.round}",
                                                            runner.tick):
                self._release(job_id)

    def _take_stored(self, runner: JobRunner) -> None:
        runner.queued += runner.take_stored(self.reject)

    def housekeeping(self) -> bool:
        """What needs the database: claim and renew jobs, start those whose agents are online, store
        rejection counts, publish promoted models, prune. True when it found something to do."""
        if not self.connected.is_set():
            return False
        before = set(self.jobs)
        self._flush_rejections()
        if "ingest" in self.roles:
            self._prune()
        if "driver" not in self.roles:
            return False
        self._claim_jobs()
        published = 0
        if self.locks.held("publishing promoted models and feedback"):
            again = time.monotonic() - self._models_published >= self.model_republish
            published = publish_promoted(self.sessions, self.publish, again) + publish_feedback(self.sessions,
                                                                                                 self.publish)
            if again:
                self._models_published = time.monotonic()
        started = False
        fleet = status.online(self.sessions) if any(r.phase == "waiting" for r in self.jobs.values()) else {}
        for job_id, runner in list(self.jobs.items()):
            if runner.phase == "waiting":
                online = status.able(fleet, runner.type, runner.needs())
                announced = {d: c.features for d, c in fleet.items() if c.features}
                if self._isolated(job_id, runner, "starting", partial(runner.start, online, announced)):
                    self._release(job_id)
                started = started or runner.phase != "waiting"
        return bool(published) or started or set(self.jobs) != before or any(
            r.phase == "waiting" for r in self.jobs.values())

    def _claim_jobs(self) -> None:
        """Lead the jobs no live coordinator leads. On PostgreSQL a job's leader holds its advisory lock
        (store.singleton), so a coordinator takes over as soon as the leader is gone, never beside a live one; on
        SQLite (one coordinator) a lease that lapsed, or one held by an earlier life of this coordinator (its
        client id), is free."""
        now = utcnow()
        with self.sessions.begin() as s:
            active = list(s.scalars(select(Job).where(Job.status.in_(("pending", "running")))))
            self.led_elsewhere = {j.id for j in active} - set(self.jobs)
            self._elsewhere_read = time.monotonic()
            for gone in set(self.jobs) - {j.id for j in active}:  # finished or cancelled (by the API)
                log.info("job=%s no longer led here (status changed)", gone)
                self.jobs.pop(gone)
                self.locks.release(_job_lock(gone))
                self.publish(job_topic(gone), b"", True)
            for job in active:
                if job.leader == self.instance and job.id in self.jobs:
                    if not self.locks.held(_job_lock(job.id)):  # the lock went with our database connection
                        self._lost(job.id, "its lock went with the database connection")
                    elif job.lease_until - now < LEASE / 2:
                        job.lease_until = now + LEASE
                    continue
                if job.id in self.jobs:  # another coordinator took it over
                    self._lost(job.id, f"led by {job.leader} now")
                if self.locks.shared:
                    free = self.locks.held(_job_lock(job.id))  # no live coordinator holds it
                else:
                    mine = job.leader is not None and job.leader.rsplit("-", 1)[0] == self.client_id
                    free = mine or job.leader is None or job.lease_until is None or job.lease_until < now
                if not free:
                    continue
                same_holder = Job.leader.is_(None) if job.leader is None else Job.leader == job.leader
                won = s.execute(update(Job).where(Job.id == job.id, same_holder)
                                .values(leader=self.instance, lease_until=now + LEASE)).rowcount
                if won:
                    runner = family(job.type).load_runner()(job, self.sessions, self.publish, job_topic(job.id))
                    runner.leader = self.instance
                    self.jobs[job.id] = runner
                    log.info("job=%s led by %s", job.id, self.instance)
                else:
                    self.locks.release(_job_lock(job.id))

    def _led_elsewhere(self, job_id: str) -> bool:
        """Whether this active job is another coordinator's (read again at most every ELSEWHERE_READ seconds, for a
        job that started since the last poll: answers naming unknown jobs cannot make a read each)."""
        if job_id not in self.led_elsewhere and time.monotonic() - self._elsewhere_read >= ELSEWHERE_READ:
            self._elsewhere_read = time.monotonic()
            with self.sessions() as s:
                active = set(s.scalars(select(Job.id).where(Job.status.in_(("pending", "running")))))
            self.led_elsewhere = active - set(self.jobs)
        return job_id in self.led_elsewhere

    def _lost(self, job_id: str, why: str) -> None:
        """Stop leading a job another coordinator leads now (its round message and state are the new leader's)."""
        if self.jobs.pop(job_id, None) is not None:
            log.warning("job=%s no longer led here: %s", job_id, why)
        self.locks.release(_job_lock(job_id))

    def _isolated(self, job_id: str, runner: JobRunner, doing: str, step: Callable[[], object]) -> bool:
        """One job's step; whatever breaks it (a numerical error, a bug) fails that job only, not the worker.
        The database being down is not the job's fault: raised, and retried by the worker. A job another
        coordinator leads now is left to it. True: job over."""
        try:
            try:
                return step() is True
            except (OperationalError, LeadershipLostError):
                raise
            except Exception as e:
                log.exception("job=%s failed while %s", job_id, doing)
                runner.fail(f"internal error while {doing}: {type(e).__name__}: {e}")
                return True
        except LeadershipLostError as e:
            self._lost(job_id, str(e))
            return False

    def _prune(self) -> None:
        """Retention, checked hourly (store.retention): PostgreSQL's alert partitions made ahead, and anomalies and
        per-round metrics older than retention_days dropped."""
        if time.monotonic() - self._pruned < 3600 or not self.locks.held("retention"):
            return
        self._pruned = time.monotonic()
        now = utcnow()
        cutoff = None if self.retention_days is None else now - timedelta(days=self.retention_days)
        p = retention.maintain(self.sessions, now, cutoff)
        if p.made or p.dropped:
            log.info("alert partitions: made %s, dropped %s", [str(d) for d in p.made], [str(d) for d in p.dropped])
        if p.alerts or p.records or p.rounds or p.dropped:
            log.info("retention: pruned %d days of anomalies, %d anomalies, %d flagged records and %d round records "
                     "older than %s days", len(p.dropped), p.alerts, p.records, p.rounds, self.retention_days)

    def _release(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)
        self.locks.release(_job_lock(job_id))
        self.publish(job_topic(job_id), b"", True)  # clears the retained round message
        with self.sessions.begin() as s:
            job = s.get(Job, job_id)
            job.leader, job.lease_until = None, None

    def online_devices(self, job_type: str | None = None, needs: frozenset[str] = frozenset()) -> list[str]:
        """Devices online now; with a job type, those that said they can take part in it (and have the abilities
        the job needs, wire.protocol.ABILITIES), as stored in `devices` (coordinator.status)."""
        fleet = status.online(self.sessions)
        return list(fleet) if job_type is None else status.able(fleet, job_type, needs)

    def announced(self) -> dict[str, tuple[str, ...]]:
        """The numeric features each online device's records have, as its status said."""
        return {d: c.features for d, c in status.online(self.sessions).items() if c.features}

    # -- messages -------------------------------------------------------------------------------------
    def reject(self, reason: str, detail: str, topic: str, n: int = 1) -> None:
        """Count and log; the counts reach the database at most once per tick (a flood of garbage must not
        turn into a flood of writes)."""
        log.warning("rejected %s on %s: %s: %s", f"{n} alerts" if n > 1 else "message", topic, reason, detail)
        with self._rejections_lock:  # the queue's ingest thread counts too
            self.rejected[reason] += n

    def _flush_rejections(self) -> None:
        """Add the counts not yet stored to the rejections table: one atomic upsert per reason (count = count +
        n in the database), so two coordinators, or a worker and close(), never lose or double an update."""
        with self._rejections_lock:
            counted = self.rejected.copy()
            unsaved = counted - self._saved_rejections
            if not unsaved:
                return
            with self.sessions.begin() as s:
                insert = insert_for(s)
                for reason, n in unsaved.items():
                    stmt = insert(Rejection).values(reason=reason, count=n)
                    s.execute(stmt.on_conflict_do_update(index_elements=["reason"],
                                                         set_={"count": Rejection.count + stmt.excluded.count}))
            self._saved_rejections = counted

    def handle(self, topic: str, payload: bytes, mid: int = 0, qos: int = 0) -> str:
        """Validate and dispatch one message; "buffered" when it is acknowledged later (alerts)."""
        try:
            agent, what, env = agent_message(handed_agent_topic(topic) or topic, payload)
            if what == "status" and env.kind == "status":
                self.statuses.take(agent, env)
            elif what == "alerts" and env.kind in ("alert", "alerts"):
                status, accepted = self.ingest.buffer(agent, env, topic, mid, qos)
                self.accepted += accepted
                return status
            elif what == "upload":
                # an accepted answer is acknowledged once stored (round_uploads), so a coordinator taking the job
                # over has it; the device's rounds and last_seen are written with the round. Acknowledged at once:
                # the same answer again, and answers to a job another coordinator leads (its leader takes them)
                runner = self.jobs.get(env.job)
                if runner is None and not self._led_elsewhere(env.job):
                    raise ProtocolError("unknown_job", f"job {env.job!r} is not led here")
                if runner is not None and runner.accept(env, bytes(payload)):
                    self._upload_acks.append((mid, qos))
                    self.accepted += 1
                    return "buffered"
            else:
                raise ProtocolError("kind", f"{env.kind} on {what}")
            self.accepted += 1
        except ProtocolError as e:
            self.reject(e.reason, e.detail, topic)
        except OperationalError:
            raise  # the database is down: the message is not acknowledged, the broker redelivers it
        except Exception as e:  # whatever a message does to a handler, it is refused alone and acknowledged
            log.exception("message on %s broke its handler", topic)
            self.reject("error", f"{type(e).__name__}: {e}"[:300], topic)
        return "done"

    @property
    def alerts_ingested(self) -> int:
        """Alerts stored since this coordinator started (redeliveries not counted)."""
        return self.ingest.stored + (self.queue_ingest.stored if self.queue_ingest else 0)

    # -- jobs API used by the CLI, the demo and the REST API --------------------------------------------
    def create_job(self, job_id: str, type_: str, algorithm: str, params: dict[str, Any]) -> None:
        """Validate the settings (ValueError names the bad one) and store the job as pending."""
        create_job(self.sessions, job_id, job_spec(type_, {**params, "algorithm": algorithm}))

    def job_status(self, job_id: str) -> str | None:
        with self.sessions() as s:
            job = s.get(Job, job_id)
            return None if job is None else job.status


def _job_lock(job_id: str) -> str:
    return f"leading job {job_id}"
