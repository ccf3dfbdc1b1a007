"""A coordinator killed with SIGKILL mid-training resumes from its last completed round."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from sqlalchemy.orm import Session

from models.core.linalg import subspace_distance
from models.pca.baselines import centralized_pca
from models.pca.simulator import prepare_clients, simulate_pca
from store.db import Job, ModelVersion, Round, make_engine, unpack
from tests.integration.conftest import parts_for, wait_until

N, ROUNDS = 4, 12


def start_coordinator(url, db):
    return subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "coordinator", "--broker", url, "--db", db],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigkill_mid_training_then_restart_finishes_with_the_same_model(broker, fleet, traffic, tmp_path):
    data, split = traffic
    parts = parts_for(split, N)
    db = f"sqlite:///{tmp_path}/c.db"
    proc = start_coordinator(broker.url, db)
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "job", "create", "--db", db, "--id", "jr",
                          "--algorithm", "fedpg", "--rounds", str(ROUNDS), "--fraction", "0.5",
                          "--min-agents", str(N), "--features", ",".join(data.feature_names)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "jr", out.stderr
    engine = make_engine(db)

    def train_rounds():
        with Session(engine) as s:
            return s.query(Round).filter_by(job_id="jr", phase="train").count()

    for kill_after in (3, 7):  # killed twice, at different moments
        wait_until(lambda k=kill_after: train_rounds() >= k, 60, f"{kill_after} rounds")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc = start_coordinator(broker.url, db)
    try:
        wait_until(lambda: _status(engine) == "finished", 90, "job finished after restarts")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    with Session(engine) as s:
        rounds = s.query(Round).filter_by(job_id="jr").order_by(Round.round).all()
        mv = s.query(ModelVersion).filter_by(job_id="jr").one()
        Z, threshold = unpack(mv.arrays)["Z"], mv.info["threshold"]
    assert [r.round for r in rounds] == list(range(ROUNDS + 2))  # no round lost, none twice
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, "fedpg", 3, ROUNDS, 0.5, seed=0)
    clients = prepare_clients(parts, data.feature_names)
    sd = subspace_distance(Z, centralized_pca(clients.C, clients.weight, 3))
    assert abs(sd - sim["subspace_distance"]) < 1e-6
    assert abs(threshold - sim["threshold"]) < 1e-6 * threshold


def _status(engine):
    with Session(engine) as s:
        job = s.get(Job, "jr")
        return job.status if job else None
