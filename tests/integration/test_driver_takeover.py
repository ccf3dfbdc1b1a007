"""Two round drivers on one PostgreSQL database (issue 27, point 3): the leading driver is SIGKILLed mid-round, the
standby leads within 20 s, closes the round with the answers the dead driver had stored (round_uploads) and the job
ends with the model `simulate` computes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.core.linalg import subspace_distance
from models.pca.baselines import centralized_pca
from models.pca.simulator import prepare_clients, simulate_pca
from store.db import Job, ModelVersion, Rejection, Round, RoundUpload, make_engine, unpack
from tests.integration.conftest import parts_for, wait_until

N, ROUNDS = 4, 8
CLI = [sys.executable, "-m", "fedsentry.cli"]


def _driver(url: str, db: str, name: str, log) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "coordinator", "--role", "driver", "--client-id", name, "--broker", url,
                             "--db", db], stdout=subprocess.DEVNULL, stderr=(log / f"{name}.log").open("w"))


def test_sigkill_the_leading_driver_mid_round(broker, fleet, traffic, tmp_path, postgres_url):
    data, split = traffic
    parts = parts_for(split, N)
    engine = make_engine(postgres_url)
    drivers = {name: _driver(broker.url, postgres_url, name, tmp_path) for name in ("drv-a", "drv-b")}
    for i, p in enumerate(parts[:-1]):
        fleet.add(f"dev-{i}", p, data.feature_names)
    last = tmp_path / "last.csv"  # the last device is a process of its own, to be paused mid-round
    np.savetxt(last, parts[-1], delimiter=",", fmt="%.17g", header=",".join(data.feature_names), comments="")
    paused = subprocess.Popen([*CLI, "agent", "--id", f"dev-{N - 1}", "--broker", broker.url, "--train", str(last),
                               "--state-dir", str(tmp_path / "paused")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = subprocess.run([*CLI, "job", "create", "--db", postgres_url, "--id", "jt", "--type", "pca",
                              "--algorithm", "fedpg", "--rounds", str(ROUNDS), "--fraction", "1", "--deadline", "120",
                              "--min-agents", str(N), "--features", ",".join(data.feature_names)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr

        def train_rounds() -> int:
            with Session(engine) as s:
                return s.query(Round).filter_by(job_id="jt", phase="train").count()

        def stored() -> list[str]:
            with Session(engine) as s:
                return sorted(s.scalars(select(RoundUpload.device).where(RoundUpload.job_id == "jt")))

        wait_until(lambda: train_rounds() >= 3, 90, "3 training rounds")
        paused.send_signal(signal.SIGSTOP)  # the first round it has not answered when it stops waits for it
        time.sleep(2)
        wait_until(lambda: stored() == [f"dev-{i}" for i in range(N - 1)], 60, "the others' answers stored")
        open_round = _round(engine)
        leader = (_leader(engine) or "").rsplit("-", 1)[0]
        standby = next(name for name in drivers if name != leader)
        os.kill(drivers[leader].pid, signal.SIGKILL)
        killed = time.monotonic()
        drivers[leader].wait()
        wait_until(lambda: (_leader(engine) or "").startswith(standby), 20, "the standby to lead within 20 s")
        took_over = time.monotonic() - killed
        assert train_rounds() < open_round  # the open round was not closed meanwhile
        paused.send_signal(signal.SIGCONT)
        wait_until(lambda: _status(engine) == "finished", 120, "the job to finish under the standby")
    finally:
        paused.send_signal(signal.SIGCONT)
        paused.terminate()
        for p in drivers.values():
            if p.poll() is None:
                p.terminate()
        for p in (paused, *drivers.values()):
            p.wait(timeout=20)
    with Session(engine) as s:
        rounds = s.query(Round).filter_by(job_id="jt").order_by(Round.round).all()
        mv = s.query(ModelVersion).filter_by(job_id="jt").one()
        Z, threshold = unpack(mv.arrays)["Z"], mv.info["threshold"]
        left = s.scalar(select(func.count()).select_from(RoundUpload))
        refused = dict(s.execute(select(Rejection.reason, Rejection.count)).all())
    print(f"standby led {took_over:.1f} s after the SIGKILL; the open round was {open_round}")
    assert [r.round for r in rounds] == list(range(ROUNDS + 2))  # no round lost, none twice
    resumed = next(r for r in rounds if r.round == open_round)
    assert resumed.metrics.get("restored") == N - 1  # the dead driver's stored answers closed the round
    assert sorted(resumed.answered) == [f"dev-{i}" for i in range(N)]
    assert left == 0  # a closed round's answers are deleted with it
    # nothing refused: the standby leaves the leader's answers to it, and an answer sent again is acknowledged
    assert refused == {}, [(tmp_path / f"{d}.log").read_text()[-3000:] for d in drivers]
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, "fedpg", 3, ROUNDS, 1.0, seed=0)
    clients = prepare_clients(parts, data.feature_names)
    sd = subspace_distance(Z, centralized_pca(clients.C, clients.weight, 3))
    assert abs(sd - sim["subspace_distance"]) < 1e-6
    assert abs(threshold - sim["threshold"]) < 1e-6 * threshold
    engine.dispose()


def _round(engine) -> int:
    with Session(engine) as s:
        return s.get(Job, "jt").current_round or 0


def _leader(engine) -> str | None:
    with Session(engine) as s:
        return s.get(Job, "jt").leader


def _status(engine) -> str | None:
    with Session(engine) as s:
        return s.get(Job, "jt").status
