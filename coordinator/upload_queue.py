"""Devices' answers to rounds through the broker cluster's queue (issue 27, point 2): ingest workers read them from
the quorum queue `fedsentry.uploads` and store them in `round_uploads`, acknowledging a message only after the
commit; the job's driver takes them from the table (`JobRunner.take_stored`) and checks each as it checks one that
came over MQTT. A driver that dies loses nothing (its standby takes the same rows), and the uploads of a round are
spread over as many workers as run.

A worker checks only what the table needs: the message is a device's own answer (its topic), to a job that runs,
for the round it is in (`jobs.current_round`, written before the round is published). Everything else (sampled,
the answer's content) is the driver's. Answers that must never be stored (the shares a secure sum reveals to
unmask it: `coordinator.secure_sums.never_stored`) are passed on unstored to the drivers' topic
(`wire.protocol.driver_topic`, which no device may write), acknowledged once the broker confirmed them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from coordinator.secure_sums import never_stored
from store.db import Job, RoundUpload
from store.records import insert_for
from wire.protocol import Envelope, ProtocolError, driver_topic

log = logging.getLogger("fedsentry.coordinator")


class UploadIngest:
    """One worker's answers waiting for their batch: `buffer` them, `flush` stores them and acknowledges them."""

    def __init__(self, sessions: sessionmaker[Session], reject: Callable[..., None],
                 ack: Callable[[int], object], handoff: Callable[[str, bytes], None]):
        self.sessions, self.reject, self.ack, self.handoff = sessions, reject, ack, handoff
        self.waiting: list[tuple[str, Envelope, str, bytes, int]] = []  # (device, envelope, topic, payload, tag)
        self.since = 0.0  # when the oldest waiting answer came

    def buffer(self, agent: str, env: Envelope, topic: str, payload: bytes, tag: int) -> None:
        if not self.waiting:
            self.since = time.monotonic()
        self.waiting.append((agent, env, topic, payload, tag))

    def due(self, idle: bool, batch: int, wait: float) -> bool:
        """Whether to store now: answers wait and nothing else came, the batch is full, or the oldest waited `wait`
        s (a flood of alerts does not hold a round's answers back)."""
        return bool(self.waiting) and (idle or len(self.waiting) >= batch or time.monotonic() - self.since >= wait)

    def flush(self) -> None:
        """Store the waiting answers (one transaction; an answer already stored is kept, not replaced), pass on
        those never stored, refuse and count the rest, then acknowledge every one. A database error (raised) stores
        and acknowledges nothing: the worker drops its connection, and the broker delivers them again."""
        batch, self.waiting = self.waiting, []
        if not batch:
            return
        with self.sessions() as s:
            jobs = {j.id: j for j in s.scalars(select(Job).where(Job.id.in_({e.job for _, e, _, _, _ in batch})))}
        rows: dict[tuple[str, int, str], dict[str, Any]] = {}
        handed: list[tuple[str, bytes]] = []
        for agent, env, topic, payload, _ in batch:
            try:
                job = _open_round(jobs.get(env.job), env)
            except ProtocolError as e:
                self.reject(e.reason, e.detail, topic)
                continue
            if never_stored(job.phase):
                handed.append((driver_topic(agent), payload))
            else:  # the first of one device's answers to a round is kept (the driver refuses a second one too)
                rows.setdefault((env.job, env.round, agent), {
                    "job_id": env.job, "round": env.round, "device": agent, "phase": job.phase, "payload": payload})
        if rows:
            with self.sessions.begin() as s:
                s.execute(insert_for(s)(RoundUpload).on_conflict_do_nothing(), list(rows.values()))
        for topic, payload in handed:
            self.handoff(topic, payload)
        for *_, tag in batch:
            self.ack(tag)


def _open_round(job: Job | None, env: Envelope) -> Job:
    """The job an answer is for, when it is for the round that job is in; else ProtocolError (the driver's reasons)."""
    if job is None:
        raise ProtocolError("unknown_job", f"job {env.job!r} does not exist")
    if job.status != "running":
        raise ProtocolError("stale", f"job {env.job!r} is {job.status}")
    if env.round < job.current_round:
        raise ProtocolError("stale", f"round {env.round} < current {job.current_round}")
    if env.round > job.current_round:
        raise ProtocolError("future", f"round {env.round} > current {job.current_round}")
    return job
