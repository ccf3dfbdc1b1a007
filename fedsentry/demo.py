"""`fedsentry demo`: a broker, the coordinator, and N agent processes on this machine, end to end.

Each agent gets one partition of the training records (exactly the partition `simulate` would give
client i with the same settings) and a share of the test traffic. The job trains, its model is promoted,
and the agents replay their test traffic and publish alerts. For evaluation only, agents also write the
score of every replayed record, so AUC is computed over all records; labels never reach the model.
"""

from __future__ import annotations

import argparse
import csv
import logging
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.errors import UsageError

log = logging.getLogger("fedsentry.demo")


def _write_csv(path: Path, names: list[str], X: np.ndarray, labels: np.ndarray | None = None) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*names, "label"] if labels is not None else names)
        for i, row in enumerate(X):
            w.writerow([*(f"{v:.17g}" for v in row), *([int(labels[i])] if labels is not None else [])])


def demo(args: argparse.Namespace) -> dict[str, Any]:
    if args.job == "recsys":
        from fedsentry.demo_recsys import demo_recsys

        return demo_recsys(args)
    from coordinator.broker import EmbeddedBroker
    from coordinator.db import Alert, ModelVersion, Round, unpack
    from coordinator.service import Coordinator
    from fedsentry.cmd_pca import algorithm_params, prepare
    from models.linalg import subspace_distance
    from models.metrics import auc_roc
    from models.pca.baselines import centralized_pca
    from models.simulator import prepare_clients

    args.clients = args.agents
    data, split, parts = prepare(args)
    tmp = Path(tempfile.mkdtemp(prefix="fedsentry-demo-"))
    test_parts = np.array_split(np.random.default_rng(args.seed).permutation(len(split.X_test)), args.agents)
    broker = None
    url = args.broker
    if not url:
        broker = EmbeddedBroker().start()
        url = broker.url
    print(f"fedsentry demo: {args.agents} agents, {args.algorithm}, {args.rounds} rounds on {data.name}; "
          f"broker {url}; work folder {tmp}", file=sys.stderr, flush=True)
    coord = None
    procs: list[subprocess.Popen] = []
    job_id = f"demo-{uuid.uuid4().hex[:8]}"
    try:
        try:
            coord = Coordinator(url, args.db).start()
        except ValueError as e:
            raise UsageError(str(e)) from None
        if not coord.connected.wait(15):
            raise UsageError(f"cannot reach the MQTT broker at {url} (is it running?)")
        for i in range(args.agents):
            agent_id = f"demo-agent-{i:03d}"
            _write_csv(tmp / f"train-{i}.csv", data.feature_names, parts[i])
            idx = test_parts[i]
            _write_csv(tmp / f"test-{i}.csv", data.feature_names, split.X_test[idx], split.y_test[idx])
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "fedsentry.cli", "agent", "--broker", url, "--id", agent_id,
                 "--train", str(tmp / f"train-{i}.csv"), "--csv", str(tmp / f"test-{i}.csv"), "--label-column",
                 "label", "--state-dir", str(tmp / f"agent-{i}"), "--model-job", job_id, "--wait-for-model",
                 "--exit-after-replay", "--scores-out", str(tmp / f"scores-{i}.csv")],
                stdout=subprocess.DEVNULL, stderr=open(tmp / f"agent-{i}.log", "w")))  # noqa: SIM115
        params = {"features": data.feature_names, "rank": args.rank, "rounds": args.rounds,
                  "fraction": args.fraction, "seed": args.seed, "quantile": args.quantile,
                  "min_agents": args.agents, "deadline": 30.0,
                  "algorithm_params": {k: v for k, v in algorithm_params(args).items() if v is not None
                                       and k in _accepted(args.algorithm)}}
        _wait_online(coord, [f"demo-agent-{i:03d}" for i in range(args.agents)], procs, tmp)
        coord.create_job(job_id, "pca", args.algorithm, params)
        t0 = time.monotonic()
        _follow(coord, job_id, args.rounds)
        train_seconds = time.monotonic() - t0
        print(f"fedsentry demo: model promoted; agents replay {len(split.X_test)} test records", file=sys.stderr)
        for p in procs:
            p.wait(timeout=600)
        with coord.sessions() as s:
            rounds = s.query(Round).filter_by(job_id=job_id, phase="train").all()
            alerts = s.query(Alert).filter_by(job_id=job_id).count()
            mv = s.query(ModelVersion).filter_by(job_id=job_id).one()
            Z = unpack(mv.arrays)["Z"]
        scores = np.vstack([np.loadtxt(tmp / f"scores-{i}.csv", delimiter=",", ndmin=2) for i in range(args.agents)])
        clients = prepare_clients(parts, data.feature_names)
        ref = centralized_pca(clients.C, clients.weight, args.rank)
        result = {
            "job": job_id, "dataset": data.name, "algorithm": args.algorithm, "agents": args.agents,
            "rounds_completed": len(rounds), "alerts_stored": alerts, "records_scored": len(scores),
            "auc_roc": auc_roc(scores[:, 1], scores[:, 0]),
            "subspace_distance": subspace_distance(Z, ref), "threshold": mv.info["threshold"],
            "seconds_per_round": float(np.mean([r.seconds for r in rounds])) if rounds else None,
            "median_round_seconds": float(np.median([r.seconds for r in rounds])) if rounds else None,
            "training_seconds": train_seconds, "dropouts": int(sum(r.metrics["dropouts"] for r in rounds)),
            "rejected": dict(coord.rejected), "broker": url, "work_folder": str(tmp),
        }
        print(f"fedsentry demo: {result['rounds_completed']} rounds, {alerts} alerts stored, "
              f"AUC {result['auc_roc']:.4f}, subspace distance {result['subspace_distance']:.4f}",
              file=sys.stderr)
        if args.keep_serving:
            print("fedsentry demo: serving until interrupted (Ctrl-C)", file=sys.stderr)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        if coord:
            coord.close()
        if broker:
            broker.stop()


def _accepted(algorithm: str) -> tuple[str, ...]:
    from models.pca import FEDERATED

    return FEDERATED[algorithm].__init__.__code__.co_varnames


def _wait_online(coord, ids: list[str], procs: list[subprocess.Popen], tmp: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        dead = [i for i, p in enumerate(procs) if p.poll() is not None]
        if dead:
            err = (tmp / f"agent-{dead[0]}.log").read_text().strip().splitlines()[-1:]
            raise UsageError(f"agent {dead[0]} exited: {err[0] if err else 'no output'}")
        if set(ids) <= set(coord.online_devices()):
            return
        time.sleep(0.1)
    raise UsageError(f"the agents did not come online within {timeout:.0f} s (broker unreachable?)")


def _follow(coord, job_id: str, rounds: int) -> None:
    last = -1
    while True:
        status = coord.job_status(job_id)
        with coord.sessions() as s:
            from coordinator.db import Job

            job = s.get(Job, job_id)
            cur = job.current_round if job else 0
        if cur != last:
            last = cur
            print(f"\rfedsentry demo: round {min(cur, rounds)}/{rounds}", end="", file=sys.stderr, flush=True)
        if status == "finished":
            print(file=sys.stderr)
            return
        if status == "failed":
            raise UsageError(f"job {job_id} failed: {job.error}")
        time.sleep(0.1)
