"""A real broker for the integration tests: a private Mosquitto on a free port when `mosquitto` is
installed (CI installs it), the embedded amqtt broker otherwise (the run summary says so). Both are open
to anonymous clients on 127.0.0.1: these tests are about the protocol; the brokers' credentials, ACLs and
size limits are tested in tests/deploy."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.broker import EmbeddedBroker, Mosquitto
from coordinator.service import Coordinator
from edge_agent.agent import Agent, AgentConfig
from edge_agent.sources import Batch
from fedsentry.data.datasets import TrafficData, train_test_split
from models.partition import partition
from models.synthetic import generate_traffic

HAVE_MOSQUITTO = shutil.which("mosquitto") is not None or Path("/usr/sbin/mosquitto").exists()


def pytest_report_header(config):
    return "MQTT broker for integration tests: " + ("mosquitto" if HAVE_MOSQUITTO else
                                                     "embedded amqtt (mosquitto not installed)")


class OpenEmbeddedBroker(EmbeddedBroker):
    """The embedded broker without its per-run credentials and ACL, as open as the private test Mosquitto
    (the product never starts it so)."""

    def config(self, passwd: Path) -> dict[str, Any]:
        return {**super().config(passwd),
                "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}}}


@pytest.fixture
def broker():
    b = (Mosquitto() if HAVE_MOSQUITTO else OpenEmbeddedBroker()).start()
    yield b
    b.close()


@pytest.fixture(scope="session")
def traffic():
    t = generate_traffic(n_devices=12, records_per_device=150, seed=1)
    data = TrafficData("synthetic", t.feature_names, t.X_normal, t.X_attack)
    return data, train_test_split(data, seed=0)


def parts_for(split, n):
    return [split.X_train[i] for i in partition(split.X_train, n, "noniid", np.random.default_rng(0))]


class Fleet:
    """In-process agents (one thread each) with their own state folders."""

    def __init__(self, url: str, tmp: Path):
        self.url, self.tmp = url, tmp
        self.agents: dict[str, Agent] = {}
        self.threads: dict[str, threading.Thread] = {}

    def add(self, agent_id: str, training: np.ndarray | None, names: list[str], source=None, **cfg) -> Agent:
        config = AgentConfig(agent_id, self.url, str(self.tmp / agent_id), **cfg)
        agent = Agent(config, source, iter([Batch(names, training)]) if training is not None else None)
        th = threading.Thread(target=agent.run, daemon=True)
        th.start()
        self.agents[agent_id], self.threads[agent_id] = agent, th
        return agent

    def stop(self, agent_id: str) -> None:
        self.agents[agent_id].stop.set()
        self.threads[agent_id].join(timeout=10)

    def close(self) -> None:
        for a in list(self.agents):
            self.stop(a)


@pytest.fixture
def fleet(broker, tmp_path):
    f = Fleet(broker.url, tmp_path)
    yield f
    f.close()


@pytest.fixture
def coordinator(broker, tmp_path):
    c = Coordinator(broker.url, f"sqlite:///{tmp_path}/coordinator.db").start()
    yield c
    c.close()


def wait_until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class JobResult:
    """A job run to its end: its rounds (in order) and its model version's arrays, info and promotion."""

    rounds: list[Any]
    arrays: dict[str, np.ndarray]
    info: dict[str, Any]
    promoted: bool


def finished(sessions: Callable[[], Any], job_id: str, status: Callable[[], str], timeout: float,
             what: str | None = None) -> JobResult:
    """Wait until the job `job_id` ends (`status`: its status now), check that it finished (else fail with its last
    two rounds' metrics) and read its rounds and model version through `sessions`."""
    from store.db import ModelVersion, Round, unpack

    wait_until(lambda: status() in ("finished", "failed"), timeout, what or f"job {job_id}")
    with sessions() as s:
        rounds = s.query(Round).filter_by(job_id=job_id).order_by(Round.round).all()
        assert status() == "finished", [r.metrics for r in rounds[-2:]]
        mv = s.query(ModelVersion).filter_by(job_id=job_id).one()
        return JobResult(rounds, unpack(mv.arrays), dict(mv.info), bool(mv.promoted))


def coordinator_result(coordinator: Coordinator, job_id: str, timeout: float) -> JobResult:
    """`finished` for a job of this test's coordinator."""
    return finished(coordinator.sessions, job_id, lambda: coordinator.job_status(job_id), timeout)


def late_agent_alerts(fleet, coordinator, feature_names, attacks, name: str, detector: str):
    """A late agent that replays `attacks` (each with a uid) once the promoted model reaches it: its detector is
    the family's, it flags more than 20 of them and every flagged record is stored as an alert. Returns the first
    stored alert."""
    from edge_agent.sources import Batch
    from store.db import Alert

    uids = np.array([f"C{i:05d}" for i in range(len(attacks))], dtype=object)
    late = fleet.add(name, None, feature_names, source=iter([Batch(feature_names, attacks, text={"uid": uids})]),
                     wait_for_model=True, alert_burst=1000)
    wait_until(lambda: late.counters["records"] == len(attacks), 20, "late agent scoring")
    det = late.scorer.detector
    assert type(det).__name__ == detector
    flagged = int((det.score_samples(attacks) > det.threshold_).sum())
    assert flagged > 20
    with coordinator.sessions() as s:
        wait_until(lambda: s.query(Alert).filter_by(device_id=name).count() == flagged, 10, "alerts stored")
        a = s.query(Alert).filter_by(device_id=name).first()
    assert a.flow["uid"] in set(uids)  # the alert names its record, stored and served
    return a
