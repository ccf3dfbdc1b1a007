"""One live coordinator leads a job (issue 27, point 3): on PostgreSQL a job's leader holds its advisory lock
(store.singleton). A second coordinator under the same client id, on another broker, once took the job beside the
live leader at once ("an earlier life of mine"); now it waits, and takes over within seconds of the leader's
database connection dying. A leader that lost its job writes nothing more: its saves are fenced on the jobs row,
and the job is left to the new leader, not failed."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from coordinator.broker import Mosquitto
from coordinator.service import Coordinator
from store.db import Job
from store.singleton import lock_key
from tests.integration.conftest import HAVE_MOSQUITTO, wait_until

pytestmark = pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed")
SPEC = {"features": ["a", "b", "c"], "rank": 2, "rounds": 5, "min_agents": 50}  # waits: no agent comes


@pytest.fixture
def brokers():
    out = [Mosquitto().start(), Mosquitto().start()]
    yield out
    for b in out:
        b.close()


def _leader(c: Coordinator, job_id: str) -> str | None:
    with c.sessions() as s:
        return s.get(Job, job_id).leader


def test_a_live_leader_keeps_its_job_and_a_dead_one_is_replaced(brokers, postgres_url):
    a = Coordinator(brokers[0].url, postgres_url).start()  # both with the default client id
    b = None
    try:
        wait_until(a.connected.is_set, 10, "coordinator a connected")
        a.create_job("j1", "pca", "fedmm", SPEC)
        wait_until(lambda: _leader(a, "j1") == a.instance and "j1" in a.jobs, 20, "a to lead the job")
        b = Coordinator(brokers[1].url, postgres_url).start()
        wait_until(b.connected.is_set, 10, "coordinator b connected")
        time.sleep(5)  # b polls and asks for the job's lock again and again meanwhile
        assert _leader(a, "j1") == a.instance and "j1" not in b.jobs, "a second leader beside a live one"
        a.stop_event.set()  # a dies: its worker stops, nothing is released, and its connections go
        a.thread.join(10)
        with b.sessions() as s:
            s.execute(text("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                           "AND objid = (:k & 4294967295)"), {"k": lock_key("leading job j1")})
            s.commit()
        wait_until(lambda: _leader(b, "j1") == b.instance and "j1" in b.jobs, 20, "b to take the job over")
        with b.sessions() as s:
            assert s.get(Job, "j1").status == "pending"  # taken over, not failed
    finally:
        for c in (a, b):
            if c is not None:
                c.close()


def test_a_leader_that_lost_its_job_writes_nothing_and_does_not_fail_it(brokers, tmp_path):
    a = Coordinator(brokers[0].url, f"sqlite:///{tmp_path}/c.db")
    try:
        a.create_job("j2", "pca", "fedmm", SPEC)
        a._claim_jobs()
        runner = a.jobs["j2"]
        with a.sessions.begin() as s:  # another coordinator took it over
            s.get(Job, "j2").leader = "fedsentry-coordinator-elsewhere"
        assert a._isolated("j2", runner, "failing it", lambda: runner.fail("a bug")) is False
        assert "j2" not in a.jobs
        with a.sessions() as s:
            job = s.get(Job, "j2")
            assert (job.status, job.leader, job.error) == ("pending", "fedsentry-coordinator-elsewhere", None)
    finally:
        a.close()
