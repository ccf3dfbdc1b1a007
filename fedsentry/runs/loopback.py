"""A job without a broker: the coordinator's job runner and the agents' participants exchanging real encoded
envelopes in one process, over a real database. Tests pin deployment to simulation with it; `bench scale`
measures a round's messages and the server step with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from models.families import family, job_spec
from store.db import Job, ModelVersion, make_engine, migrate, session_factory
from store.jobs import create_job
from wire.protocol import decode


class Loopback:
    """A job runner and its participants, messages passed as bytes, rounds closed as soon as all answer."""

    def __init__(self, db: str | Path, job_type: str, algorithm: str, settings: dict[str, Any], participants: list,
                 job: str = "loop"):
        """`db`: a database URL, or a folder for a SQLite file."""
        url = db if isinstance(db, str) and "://" in db else f"sqlite:///{db}/loop.db"
        self.engine = make_engine(url)
        migrate(self.engine)
        self.sessions, self.job = session_factory(self.engine), job
        create_job(self.sessions, job, job_spec(job_type, {**settings, "algorithm": algorithm}))
        self.job_type = job_type
        self.outbox: list[bytes] = []
        self.runner = self.new_runner()
        self.participants = participants

    def new_runner(self) -> Any:
        """A job runner for the job as the database holds it (a new coordinator's)."""
        with self.sessions() as s:
            row = s.get(Job, self.job)
        return family(self.job_type).load_runner()(row, self.sessions,
                                                   lambda topic, payload, retain: self.outbox.append(payload),
                                                   f"fedsentry/v1/jobs/{self.job}/round")

    def crash(self) -> None:
        """The coordinator crashes (its open round lost) and a new one resumes the job from the stored state."""
        self.outbox.clear()
        self.runner = self.new_runner()
        self.start()

    def start(self) -> None:
        self.runner.start(sorted(p.id for p in self.participants))

    def answers(self, message: bytes) -> list[bytes]:
        """Every participant's reply to a round message, encoded as it is sent (those that answer)."""
        out = []
        for p in self.participants:
            reply = p.on_round(decode(message))
            if reply is not None:
                out.append(reply.encode())
        return out

    def step(self) -> bool:
        """One round: the message last published, answered and accepted, the round closed; True when over."""
        for payload in self.answers(self.outbox.pop()):
            self.runner.accept(decode(payload))
        over = bool(self.runner.tick())
        assert over or self.runner.phase != "waiting"
        return over

    def run(self) -> ModelVersion:
        self.start()
        while not self.step():
            pass
        assert self.runner.phase == "finished", self.runner.phase
        with self.sessions() as s:
            return s.query(ModelVersion).filter_by(job_id=self.job).one()


def detector_participants(folder: Path, job_type: str, features: list[str], parts: list[np.ndarray],
                          prefix: str = "dev", names: list[str] | None = None) -> list:
    """One participant of a detector family per partition, each with its records in its training buffer (`names`:
    their ids, else prefix-00, prefix-01, ...)."""
    from edge_agent.detector_participant import TrainingBuffer
    from edge_agent.sources import Batch
    from edge_agent.store import AgentStore

    out = []
    for i, X in enumerate(parts):
        name = names[i] if names else f"{prefix}-{i:02d}"
        store = AgentStore(Path(folder) / name)
        buffer = TrainingBuffer(store)
        buffer.add(Batch(features, X))
        out.append(family(job_type).load_participant()(name, store, buffer))
    return out
