"""What an ingest worker does with the answers to rounds it reads from the queue (coordinator.upload_queue): an
answer for the round its job is in is stored in round_uploads (once), a revealed share of a secure sum is passed on
unstored, and anything else is refused with the driver's reason and counted; every message is acknowledged only
after that."""

from __future__ import annotations

from sqlalchemy import select

from coordinator.upload_queue import UploadIngest
from store.db import Job, RoundUpload, make_engine, migrate, session_factory
from wire.protocol import Envelope, agent_topic, driver_topic


def _answer(job: str, rnd: int, device: str) -> tuple[Envelope, bytes]:
    env = Envelope("upload", job, rnd, device, meta={"n": 1})
    return env, env.encode()


def test_answers_are_stored_for_their_round_passed_on_or_refused_and_all_acknowledged(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/u.db")
    migrate(engine)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.add(Job(id="j", type="pca", algorithm="fedpg", params={}, status="running", phase="train", current_round=3))
        s.add(Job(id="p", type="pca", algorithm="fedmm", params={}, status="running", phase="mean:unmask",
                  current_round=4))
        s.add(Job(id="done", type="pca", algorithm="fedpg", params={}, status="finished", phase="finished",
                  current_round=9))
    refused, acked, handed = [], [], []
    uploads = UploadIngest(sessions, lambda reason, detail, topic, n=1: refused.append((reason, topic)), acked.append,
                           lambda topic, payload: handed.append((topic, payload)))
    cases = [("j", 3, "a"), ("j", 3, "a"), ("j", 3, "b"), ("j", 2, "c"), ("j", 4, "d"), ("nope", 0, "e"),
             ("done", 9, "f"), ("p", 4, "g")]
    for tag, (job, rnd, device) in enumerate(cases):
        env, payload = _answer(job, rnd, device)
        uploads.buffer(device, env, agent_topic(device, "upload"), payload, tag)
    assert uploads.due(True, 64, 1.0)
    uploads.flush()
    with sessions() as s:
        rows = s.execute(select(RoundUpload.job_id, RoundUpload.round, RoundUpload.device, RoundUpload.phase)).all()
    assert sorted(rows) == [("j", 3, "a", "train"), ("j", 3, "b", "train")]  # the same answer twice: stored once
    assert [t for t, _ in handed] == [driver_topic("g")]  # a revealed share: passed on, never stored
    assert sorted(refused) == [("future", agent_topic("d", "upload")), ("stale", agent_topic("c", "upload")),
                               ("stale", agent_topic("f", "upload")), ("unknown_job", agent_topic("e", "upload"))]
    assert sorted(acked) == list(range(len(cases))) and not uploads.waiting
