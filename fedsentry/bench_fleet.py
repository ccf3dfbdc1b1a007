"""`fedsentry bench fleet`: many agents on one local broker, and the memory of one scoring agent.

Agents share this process (one thread and one MQTT connection each), as the issue allows; the
coordinator runs here too, with its database. A round's time is what the coordinator measured from
its broadcast to its stored aggregate (broadcast, local steps, uploads, aggregation, store).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.cmd_common import write_json


def register(groups: dict[str, Any], verbs: Any) -> None:
    from fedsentry.cmd_common import positive_int

    p = groups["bench"].add_parser("fleet", help="round time with many agents on one broker; agent memory")
    p.add_argument("--agents", type=positive_int, default=100)
    p.add_argument("--rounds", type=positive_int, default=20)
    p.add_argument("--fraction", type=float, default=0.1)
    p.add_argument("--algorithm", default="fedmm")
    p.add_argument("--broker", help="use this broker (default: a private Mosquitto, else the embedded one)")
    p.add_argument("--db", help="database URL (default: SQLite in a temporary folder)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--json", metavar="PATH")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), **fleet_rounds(args), **agent_memory()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"fleet-{args.agents}.md").write_text(markdown(result))
    write_json(result, args.json)
    print(markdown(result), file=sys.stderr)
    return 0


def _broker(url: str | None):
    from coordinator.broker import EmbeddedBroker, Mosquitto

    if url:
        return None, url, "given"
    try:
        b = Mosquitto().start()
        return b, b.url, "mosquitto"
    except FileNotFoundError:
        b = EmbeddedBroker().start()
        return b, b.url, "embedded amqtt"


def fleet_rounds(args: argparse.Namespace) -> dict[str, Any]:
    from coordinator.db import Round
    from coordinator.service import Coordinator
    from edge_agent.agent import Agent, AgentConfig
    from edge_agent.sources import Batch
    from models.partition import partition
    from models.synthetic import generate_traffic

    broker, url, kind = _broker(args.broker)
    tmp = Path(tempfile.mkdtemp(prefix="fedsentry-fleet-"))
    traffic = generate_traffic(n_devices=args.agents, records_per_device=100, seed=0)
    parts = partition(traffic.X_normal, args.agents, "noniid", np.random.default_rng(0))
    coord = Coordinator(url, args.db or f"sqlite:///{tmp}/fleet.db").start()
    agents, threads = [], []
    try:
        for i, idx in enumerate(parts):
            a = Agent(AgentConfig(f"fleet-{i:04d}", url, str(tmp / f"a{i}")), None,
                      iter([Batch(traffic.feature_names, traffic.X_normal[idx])]))
            t = threading.Thread(target=a.run, daemon=True)
            t.start()
            agents.append(a)
            threads.append(t)
        end = time.monotonic() + 120
        while len(coord.online_devices()) < args.agents and time.monotonic() < end:
            time.sleep(0.1)
        coord.create_job("fleet", "pca", args.algorithm, {
            "features": traffic.feature_names, "rank": 3, "rounds": args.rounds, "fraction": args.fraction,
            "seed": 0, "min_agents": args.agents, "deadline": 30.0})
        t0 = time.monotonic()
        while coord.job_status("fleet") not in ("finished", "failed") and time.monotonic() - t0 < 600:
            time.sleep(0.1)
        with coord.sessions() as s:
            rounds = s.query(Round).filter_by(job_id="fleet").order_by(Round.round).all()
        train = [r.seconds for r in rounds if r.phase == "train"]
        ingestion = alert_ingestion(coord, agents[: min(100, len(agents))])
        return {"agents": args.agents, "broker": kind, "fraction": args.fraction, "algorithm": args.algorithm,
                "rounds": len(train), "round_seconds_median": float(np.median(train)),
                "round_seconds_max": float(np.max(train)),
                "stats_phase_seconds": rounds[0].seconds, "threshold_phase_seconds": rounds[-1].seconds,
                "job_status": coord.job_status("fleet"), "rejected": dict(coord.rejected), **ingestion}
    finally:
        for a in agents:
            a.stop.set()
        for t in threads:
            t.join(timeout=5)
        coord.close()
        if broker:
            broker.stop()


def alert_ingestion(coord, agents, per_agent: int = 50) -> dict[str, Any]:
    """Agents publish alerts as fast as they can (QoS 1); time until every one is stored."""
    import uuid

    from coordinator.db import Alert
    from edge_agent.protocol import Envelope

    with coord.sessions() as s:
        before = s.query(Alert).count()
    total = len(agents) * per_agent
    t0 = time.monotonic()
    for a in agents:
        for _ in range(per_agent):
            alert = {"id": uuid.uuid4().hex, "ts": time.time(), "score": 9.0, "threshold": 1.0,
                     "explanation": [{"feature": "src_bytes", "share": 1.0, "value": 1.0, "expected": 0.0}]}
            env = Envelope("alert", "fleet", 1, a.cfg.agent_id, {}, alert)
            a.client.publish(a.topic("alerts"), env.encode(), qos=1)
    stored = 0
    while time.monotonic() - t0 < 300:
        with coord.sessions() as s:
            stored = s.query(Alert).count() - before
        if stored >= total:
            break
        time.sleep(0.05)
    seconds = time.monotonic() - t0
    return {"alerts_published": total, "alerts_stored": stored, "alert_ingestion_per_second": stored / seconds}


def agent_memory(records: int = 200_000) -> dict[str, Any]:
    """Peak resident memory of a real `fedsentry agent` process scoring a CSV replay with a model."""
    from coordinator.broker import EmbeddedBroker
    from edge_agent.mqtt import make_client
    from edge_agent.protocol import model_topic
    from edge_agent.scorer import model_envelope
    from models.detector import PCADetector
    from models.synthetic import generate_traffic

    tmp = Path(tempfile.mkdtemp(prefix="fedsentry-agentmem-"))
    t = generate_traffic(n_devices=40, records_per_device=500, seed=3)
    det = PCADetector(rank=3).fit(t.X_normal, t.feature_names)
    X = np.vstack([t.X_normal, t.X_attack])
    X = X[np.random.default_rng(0).integers(0, len(X), records)]
    np.savetxt(tmp / "replay.csv", X, delimiter=",", header=",".join(t.feature_names), comments="", fmt="%.6g")
    broker = EmbeddedBroker().start()
    try:
        client, b = make_client("bench-publisher", broker.url, clean_session=True)
        client.connect(b.host, b.port)
        client.loop_start()
        env = model_envelope("bench", 1, det.components_, det.preprocessor_, det.threshold_)
        client.publish(model_topic("pca"), env.encode(), qos=1, retain=True).wait_for_publish(5)
        proc = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "agent", "--broker", broker.url, "--id",
                                 "mem-agent", "--csv", str(tmp / "replay.csv"), "--state-dir", str(tmp / "state"),
                                 "--wait-for-model", "--exit-after-replay"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak, t0 = 0.0, time.monotonic()
        status = Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM"):
                        peak = max(peak, int(line.split()[1]) / 1024)
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        client.disconnect()
        client.loop_stop()
    finally:
        broker.stop()
    return {"agent_peak_rss_mb": peak, "agent_records": records, "agent_seconds": seconds,
            "agent_records_per_second": records / seconds}


def markdown(r: dict[str, Any]) -> str:
    return "\n".join([
        "# Fleet benchmark", "", f"Command: `{r['command']}`", "",
        f"- {r['agents']} agents ({r['broker']} broker, one process, one MQTT connection each), "
        f"{r['algorithm']}, {r['fraction']:.0%} sampled per round, {r['rounds']} rounds: "
        f"median round {r['round_seconds_median']:.3f} s, slowest {r['round_seconds_max']:.3f} s "
        f"(broadcast, local steps, uploads, aggregation, store); statistics phase "
        f"{r['stats_phase_seconds']:.3f} s, threshold phase {r['threshold_phase_seconds']:.3f} s.",
        f"- Alert ingestion: {r['alerts_published']:,} alerts published at once by {min(100, r['agents'])} agents "
        f"(QoS 1), {r['alerts_stored']:,} stored, {r['alert_ingestion_per_second']:,.0f} alerts/s.",
        f"- One `fedsentry agent` process replaying {r['agent_records']:,} records through a model "
        f"(scoring, explanations, alerts): peak resident memory {r['agent_peak_rss_mb']:.1f} MB, "
        f"{r['agent_records_per_second']:,.0f} records/s end to end.", ""])
