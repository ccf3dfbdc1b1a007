"""`fedsentry bench agent-memory`: the resident memory of one real `fedsentry agent` process through a whole
training job with the default detector, and while it scores afterwards.

A coordinator (this process) and a broker (a private Mosquitto, else the embedded one) drive one agent given a
training file of `--records` records (nsl-kdd's normal records drawn with repetition where the shared data is
present, synthetic traffic otherwise: repeated records are what real traffic holds). The agent's
/proc/<pid>/status is read every 20 ms: VmHWM (the kernel's own peak) before the job, at the end of training, and
VmRSS while it scores a replay with the promoted model afterwards.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.bench.waiting import wait_while_running
from fedsentry.output import write_results


def status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, and VmRSS's parts (RssAnon: its own memory; RssFile: library and file pages
    it maps, which the kernel counts more of for freshly written files), in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM", "RssAnon", "RssFile")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


class Sampler(threading.Thread):
    """Reads a process's memory every `every` seconds until it exits; `mark(name)` starts a new phase, whose
    largest VmRSS and the VmHWM at its end are kept."""

    def __init__(self, pid: int, every: float = 0.02):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.phase = "start"
        self.phases: dict[str, dict[str, float]] = {}
        self.stopped = threading.Event()

    def mark(self, phase: str) -> None:
        self.phase = phase

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                s = status(self.pid)
            except (FileNotFoundError, ProcessLookupError, IndexError):
                return
            p = self.phases.setdefault(self.phase, {})
            for k, v in s.items():
                p[k] = max(p.get(k, 0.0), v)
            time.sleep(self.every)


def training_records(n: int, data_dir: str | None, seed: int = 0) -> tuple[str, list[str], np.ndarray, np.ndarray]:
    """(dataset, feature names, n training records, replay records with attacks)."""
    from fedsentry.data import datasets

    name = "nsl-kdd" if datasets.shared_data_available("nsl-kdd", data_dir) else "synthetic"
    data = datasets.load_named(name, data_dir, seed)
    rng = np.random.default_rng(seed)
    train = data.X_normal[rng.integers(0, len(data.X_normal), n)]
    replay = np.vstack([data.X_normal[rng.integers(0, len(data.X_normal), 20_000)],
                        data.X_attack[rng.integers(0, len(data.X_attack), 2_000)]])
    return name, data.feature_names, train, replay[rng.permutation(len(replay))]


def measure(records: int = 50_000, data_dir: str | None = None, budget: str | None = None,
            timeout: float = 900, detector: str | None = None, rounds: int | None = None) -> dict[str, Any]:
    """One agent process through a job at the family's defaults (`rounds`: fewer training rounds than the default,
    for tests: every round of a job does the same work, so its peak is any round's), then scoring its replay."""
    from coordinator.broker import EmbeddedBroker, Mosquitto
    from coordinator.service import Coordinator
    from models.families import DEFAULT_DETECTOR, family

    detector = detector or DEFAULT_DETECTOR

    tmp = Path(tempfile.mkdtemp(prefix="fedsentry-agentmem-"))
    dataset, names, train, replay = training_records(records, data_dir)
    for path, X in (("train.csv", train), ("replay.csv", replay)):
        np.savetxt(tmp / path, X, delimiter=",", header=",".join(names), comments="", fmt="%.6g")
    creds: dict[str, Any]
    try:
        broker: Mosquitto | EmbeddedBroker = Mosquitto().start()
        env, creds = dict(os.environ), {}
    except FileNotFoundError:
        broker = EmbeddedBroker(devices=["mem-agent"]).start()
        env, creds = {**os.environ, **broker.credentials_env("mem-agent")}, {
            "username": broker.username, "password": broker.password}
    coordinator = Coordinator(broker.url, f"sqlite:///{tmp}/coordinator.db", **creds).start()
    # a map (otmap) is learnt onto a promoted mixture: one is fitted here first, and the agent, which has nothing to
    # replay until the job ends, is stopped once the mapped model reached it (scoring is the mixture's, measured
    # with --detector gmm)
    mapped = detector == "otmap"
    if mapped:
        promote_mixture(coordinator.sessions, names, train)
    replay_flags = [] if mapped else ["--csv", str(tmp / "replay.csv"), "--wait-for-model", "--exit-after-replay"]
    cmd = [sys.executable, "-m", "fedsentry.cli", "agent", "--broker", broker.url, "--id", "mem-agent",
           "--train", str(tmp / "train.csv"), "--state-dir", str(tmp / "state"), *replay_flags,
           *(["--memory-budget", budget] if budget else [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / "agent.log", "w"), env=env)  # noqa: SIM115
    sampler = Sampler(proc.pid)
    sampler.start()
    t0 = time.monotonic()
    try:
        wait_while_running(lambda: "mem-agent" in coordinator.online_devices(detector), 60, "the agent online",
                           [proc])
        time.sleep(1.0)
        sampler.mark("idle")
        time.sleep(1.0)
        sampler.mark("training")
        coordinator.create_job("mem-1", detector, family(detector).spec.default_algorithm(),
                               {"features": names, "min_agents": 1, "deadline": 120,
                                **({"rounds": rounds} if rounds else {})})
        wait_while_running(lambda: coordinator.job_status("mem-1") in ("finished", "failed"), timeout, "the job",
                           [proc])
        training_seconds = time.monotonic() - t0
        sampler.mark("scoring")
        if coordinator.job_status("mem-1") != "finished":
            raise RuntimeError(f"the job failed: {_job_error(coordinator, 'mem-1')}")
        if mapped:
            time.sleep(3.0)  # the mapped model published and loaded
            proc.terminate()
        proc.wait(timeout)
    finally:
        sampler.stopped.set()
        if proc.poll() is None:
            proc.kill()
        coordinator.close()
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)
    phases = sampler.phases
    return {
        "command": shlex.join(["fedsentry", *sys.argv[1:]]),
        "detector": detector, "dataset": dataset, "features": len(names), "training_records": records,
        "replay_records": len(replay),
        "memory_budget": budget,
        "idle_mib": phases.get("idle", {}).get("VmRSS"),
        "training_peak_mib": phases.get("training", {}).get("VmHWM"),
        "scoring_rss_max_mib": phases.get("scoring", {}).get("VmRSS"),
        # its parts: the process's own memory, and the library pages it maps (the second varies with the page
        # cache: 4-6 MiB more right after an install, for the same code)
        "scoring_anon_max_mib": phases.get("scoring", {}).get("RssAnon"),
        "scoring_file_max_mib": phases.get("scoring", {}).get("RssFile"),
        "training_seconds": training_seconds,
        "agent_exit": proc.returncode,
    }


def promote_mixture(sessions: Any, names: list[str], X: np.ndarray, n: int = 5_000) -> None:
    """A gmm fitted on n of the training records, stored as a finished job's model and promoted (the coordinator
    publishes it)."""
    from coordinator.models_service import promote
    from models.mixture.detector import MixtureDetector
    from store.db import Job, ModelVersion, pack

    det = MixtureDetector(components=8).fit(X[:n], names)
    arrays, info = det.to_wire()
    with sessions.begin() as s:
        s.add(Job(id="mem-0", type="gmm", algorithm="fedem", params={}, status="finished", phase="finished"))
        s.flush()
        mv = ModelVersion(job_id="mem-0", version=1, type="gmm", round=0, arrays=pack(arrays), info=info,
                          published=False)
        s.add(mv)
        s.flush()
        model_id = mv.id
    promote(sessions, model_id)


def _job_error(coordinator: Any, job_id: str) -> str | None:
    from store.db import Job

    with coordinator.sessions() as s:
        job = s.get(Job, job_id)
        return None if job is None else job.error


def markdown(r: dict[str, Any]) -> str:
    return "\n".join([
        "# Agent memory", "", f"Command: `{r['command']}`", "",
        f"One `fedsentry agent` process, the {r['detector']} detector at its default settings, "
        f"{r['training_records']:,} training records "
        f"of {r['dataset']} ({r['features']} features), then "
        + ("the mapped model loaded (nothing replayed: scoring is the mixture's, --detector gmm):"
           if r["detector"] == "otmap" else f"{r['replay_records']:,} records scored:"), "",
        "| phase | MiB |", "|---|---:|",
        f"| idle, before the job (VmRSS) | {r['idle_mib']:.1f} |",
        f"| peak through the training job (VmHWM) | {r['training_peak_mib']:.1f} |",
        f"| {'the mapped model loaded, afterwards' if r['detector'] == 'otmap' else 'scoring afterwards'} "
        f"(largest VmRSS) | {r['scoring_rss_max_mib']:.1f} |", "",
        f"Training took {r['training_seconds']:.1f} s.", ""])


def run(args: argparse.Namespace) -> int:
    from models.families import DEFAULT_DETECTOR

    result = measure(args.records, args.data_dir, args.memory_budget, detector=args.detector)
    name = "agent-memory.md" if args.detector == DEFAULT_DETECTOR else f"agent-memory-{args.detector}.md"
    write_results(args.out, name, markdown(result), result, args.json)
    return 0
