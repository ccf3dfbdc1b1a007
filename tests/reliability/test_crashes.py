"""Crashes: the coordinator SIGKILLed at random moments while alerts flow, and the broker restarted
mid-job while agents keep raising alerts. Nothing lost, nothing stored twice, the same model."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from sqlalchemy.orm import Session

from edge_agent.sources import Batch
from models.core.linalg import subspace_distance
from models.pca.baselines import centralized_pca
from models.pca.simulator import prepare_clients, simulate_pca
from store.db import Alert, Job, ModelVersion, Round, make_engine, unpack
from tests.integration.conftest import parts_for, wait_until

N, ROUNDS = 4, 16


def start_coordinator(url, db):
    return subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "coordinator", "--broker", url, "--db", db],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def create_job(db, job_id, features, rounds=ROUNDS):
    subprocess.run([sys.executable, "-m", "fedsentry.cli", "job", "create", "--db", db, "--id", job_id,
                    "--algorithm", "fedpg", "--rounds", str(rounds), "--fraction", "0.5", "--min-agents", str(N),
                    "--deadline", "20", "--features", ",".join(features)], check=True, capture_output=True)


def status(engine, job_id):
    with Session(engine) as s:
        job = s.get(Job, job_id)
        return job.status if job else None


def alerts_stored(engine, device):
    with Session(engine) as s:
        ids = [a.id for a in s.query(Alert).filter_by(device_id=device)]
    return len(ids), len(set(ids))


def attack_stream(attacks, names, pause=0.05):
    """Attack records a few at a time, so alerts keep coming while the fault happens."""
    for i in range(0, len(attacks), 5):
        time.sleep(pause)
        yield Batch(names, attacks[i:i + 5])


def test_sigkill_at_random_moments_with_alerts_flowing(broker, fleet, traffic, tmp_path):
    data, split = traffic
    parts = parts_for(split, N)
    db = f"sqlite:///{tmp_path}/c.db"
    engine = make_engine(db)
    proc = start_coordinator(broker.url, db)
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    create_job(db, "warmup", data.feature_names, rounds=3)  # a promoted model, so alerts can flow
    wait_until(lambda: status(engine, "warmup") == "finished", 60, "first model")
    attacks = split.X_test[split.y_test == 1][:300]
    watcher = fleet.add("cam-1", None, data.feature_names, source=attack_stream(attacks, data.feature_names),
                        wait_for_model=True, alert_burst=10_000)
    create_job(db, "jk", data.feature_names)
    rng = random.Random(7)
    for _ in range(3):  # killed three times, at random moments
        time.sleep(rng.uniform(0.2, 1.2))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(rng.uniform(0.0, 0.5))
        proc = start_coordinator(broker.url, db)
    try:
        wait_until(lambda: status(engine, "jk") == "finished", 120, "job finished after the crashes")
        wait_until(lambda: watcher.counters["records"] == len(attacks) and len(watcher.outbox) == 0, 60,
                   "every alert acknowledged by the broker")
        sent = watcher.counters["alerts"]
        wait_until(lambda: alerts_stored(engine, "cam-1")[0] >= sent, 60, "alerts stored")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    stored, distinct = alerts_stored(engine, "cam-1")
    assert sent > 50 and stored == distinct == sent  # none lost, none twice
    with Session(engine) as s:
        rounds = [r.round for r in s.query(Round).filter_by(job_id="jk").order_by(Round.round)]
        Z = unpack(s.query(ModelVersion).filter_by(job_id="jk").one().arrays)["Z"]
    assert rounds == list(range(ROUNDS + 2))
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, "fedpg", 3, ROUNDS, 0.5, seed=0)
    clients = prepare_clients(parts, data.feature_names)
    assert abs(subspace_distance(Z, centralized_pca(clients.C, clients.weight, 3)) - sim["subspace_distance"]) < 1e-6


def test_broker_restart_mid_job(broker, coordinator, fleet, traffic):
    data, split = traffic
    parts = parts_for(split, N)
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    wait_until(lambda: len(coordinator.online_devices()) == N, 30, "agents online")
    coordinator.create_job("warm", "pca", "fedmm", {"features": data.feature_names, "rank": 3, "rounds": 3,
                                                    "fraction": 1.0, "min_agents": N})
    wait_until(lambda: coordinator.job_status("warm") == "finished", 60, "first model")
    attacks = split.X_test[split.y_test == 1][:200]
    watcher = fleet.add("cam-2", None, data.feature_names,
                        source=attack_stream(attacks, data.feature_names, pause=0.1), wait_for_model=True,
                        alert_burst=10_000)
    coordinator.create_job("jb", "pca", "fedmm", {"features": data.feature_names, "rank": 3, "rounds": 30,
                                                  "fraction": 0.5, "min_agents": N, "deadline": 30})
    wait_until(lambda: watcher.counters["alerts"] > 5, 30, "alerts flowing")
    broker.stop()  # mid-job, with alerts still coming
    time.sleep(2.0)
    buffered = len(watcher.outbox)
    broker.start()  # same port, same persistence folder
    wait_until(lambda: coordinator.job_status("jb") == "finished", 120, "job finished after the broker restart")
    wait_until(lambda: watcher.counters["records"] == len(attacks) and len(watcher.outbox) == 0, 90,
               "outbox drained")
    sent = watcher.counters["alerts"]
    with coordinator.sessions() as s:
        wait_until(lambda: s.query(Alert).filter_by(device_id="cam-2").count() >= sent, 60, "alerts stored")
        ids = [a.id for a in s.query(Alert).filter_by(device_id="cam-2")]
    assert buffered > 0  # alerts raised while the broker was down waited on the device
    assert len(ids) == len(set(ids)) == sent
    with coordinator.sessions() as s:
        assert s.query(Round).filter_by(job_id="jb", phase="train").count() == 30
