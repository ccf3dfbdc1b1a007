"""`fedsentry bench fleet`: many agents on one local broker, and the memory of one scoring agent.

Agents share this process (one thread and one MQTT connection each), as the issue allows; the
coordinator runs here too, with its database. A round's time is what the coordinator measured from
its broadcast to its stored aggregate (broadcast, local steps, uploads, aggregation, store).
It times a PCA job by name (its --algorithm is a PCA algorithm): the README's fleet table is FedMM's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedsentry.output import write_results

if TYPE_CHECKING:
    from coordinator.broker import EmbeddedBroker, Mosquitto


def run(args: argparse.Namespace) -> int:
    result = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), **fleet_rounds(args), **agent_memory()}
    write_results(args.out, f"fleet-{args.agents}.md", markdown(result), result, args.json)
    return 0


def _broker(url: str | None, devices: list[str]) -> tuple[Mosquitto | EmbeddedBroker | None, str, str]:
    from coordinator.broker import EmbeddedBroker, Mosquitto

    if url:
        return None, url, "given"
    try:
        m = Mosquitto().start()
        return m, m.url, "mosquitto"
    except FileNotFoundError:
        e = EmbeddedBroker(devices=devices).start()
        return e, e.url, "embedded amqtt"


def _credentials(broker: Mosquitto | EmbeddedBroker | None) -> dict[str, Any]:
    """The coordinator's username and password on the embedded broker (none on the others)."""
    from coordinator.broker import EmbeddedBroker

    return {"username": broker.username, "password": broker.password} if isinstance(broker, EmbeddedBroker) else {}


def fleet_rounds(args: argparse.Namespace) -> dict[str, Any]:
    from coordinator.service import Coordinator
    from models.partition import partition
    from models.synthetic import generate_traffic
    from store.db import Round

    broker, url, kind = _broker(args.broker, [f"fleet-{i:04d}" for i in range(args.agents)])
    # the embedded broker's per-device passwords reach the agent processes through multiprocessing's pipe
    passwords = getattr(broker, "passwords", {})
    tmp = Path(tempfile.mkdtemp(prefix="fedsentry-fleet-"))
    traffic = generate_traffic(n_devices=args.agents, records_per_device=100, seed=0)
    parts = partition(traffic.X_normal, args.agents, "noniid", np.random.default_rng(0))
    # agents share processes, at most PER_PROCESS each: paho waits on select(), which cannot watch file
    # descriptors past 1024, and every agent holds a socket, a socket pair and its SQLite outbox. The
    # processes are spawned (not forked) and before the coordinator starts any thread: a process forked
    # while another thread holds a lock (sqlite3's, the logging module's) can deadlock in the child.
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    workers = []
    coord = None
    try:
        for first in range(0, args.agents, PER_PROCESS):
            ids = list(range(first, min(first + PER_PROCESS, args.agents)))
            w = ctx.Process(target=_agents_process, daemon=True, args=(
                url, tmp, ids, [traffic.X_normal[parts[i]] for i in ids], traffic.feature_names, stop,
                {n: passwords[n] for i in ids if (n := f"fleet-{i:04d}") in passwords}))
            w.start()
            workers.append(w)
        coord = Coordinator(url, args.db or f"sqlite:///{tmp}/fleet.db", **_credentials(broker)).start()
        t_start = time.monotonic()
        while len(coord.online_devices()) < args.agents and time.monotonic() - t_start < 600:
            time.sleep(0.5)
        online = len(coord.online_devices())
        startup = time.monotonic() - t_start
        print(f"{online} of {args.agents} agents online after {startup:.0f} s", file=sys.stderr, flush=True)
        if online == 0:
            raise SystemExit("no agent came online")
        coord.create_job("fleet", "pca", args.algorithm, {
            "features": traffic.feature_names, "rank": 3, "rounds": args.rounds, "fraction": args.fraction,
            "seed": 0, "min_agents": online, "deadline": 30.0})
        t0 = time.monotonic()
        while coord.job_status("fleet") not in ("finished", "failed") and time.monotonic() - t0 < 600:
            time.sleep(0.1)
        with coord.sessions() as s:
            rounds = s.query(Round).filter_by(job_id="fleet").order_by(Round.round).all()
        train = [r.seconds for r in rounds if r.phase == "train"]
        ingestion = alert_ingestion(coord, url, min(100, args.agents), _credentials(broker))
        if not train:
            raise SystemExit(f"the job did not finish: {coord.job_status('fleet')}")
        return {"agents": args.agents, "online": online, "database": coord.engine.dialect.name,
                "startup_seconds": startup, "broker": kind,
                "fraction": args.fraction, "algorithm": args.algorithm,
                "rounds": len(train), "round_seconds_median": float(np.median(train)),
                "round_seconds_max": float(np.max(train)),
                "stats_phase_seconds": rounds[0].seconds, "threshold_phase_seconds": rounds[-1].seconds,
                "job_status": coord.job_status("fleet"), "rejected": dict(coord.rejected), **ingestion}
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=30)
        if coord is not None:
            coord.close()
        if broker:
            broker.close()


PER_PROCESS = 100


def _agents_process(url: str, tmp: Path, ids: list[int], parts: list[np.ndarray], names: list[str], stop,
                    passwords: dict[str, str]) -> None:
    """Real agents (the same Agent objects, participants and MQTT connections a device runs), many per
    process, driven by one thread: a select() loop over their sockets hands each agent its messages
    (Agent.handle), as each device's own agent thread would. A thread pair per agent would measure the
    interpreter's lock contention among hundreds of threads, not the federation."""
    import queue
    import select

    from edge_agent.agent import Agent, AgentConfig
    from edge_agent.sources import Batch
    from wire.mqtt import parse_broker_url

    broker = parse_broker_url(url)
    agents = []
    for i, X in zip(ids, parts):
        name = f"fleet-{i:04d}"
        cfg = AgentConfig(name, url, str(tmp / f"a{i}"), username=name if name in passwords else None,
                          password=passwords.get(name))
        agents.append(Agent(cfg, None, iter([Batch(names, X)])))
    for a in agents:
        a.client.connect(broker.host, broker.port)
    while not stop.is_set():
        sockets = {sock: a for a in agents if (sock := a.client.socket()) is not None}
        writable = [s for s, a in sockets.items() if a.client.want_write()]
        readable, writable, _ = select.select(list(sockets), writable, [], 0.05)
        for sock in readable:
            sockets[sock].client.loop_read()
        for sock in writable:
            sockets[sock].client.loop_write()
        for a in agents:
            a.client.loop_misc()
            while True:
                try:
                    a.handle(*a.inbox.get_nowait())
                except queue.Empty:
                    break
    for a in agents:
        a.client.disconnect()


def alert_ingestion(coord, url: str, n_devices: int, credentials: dict[str, Any],
                    per_agent: int = 1000) -> dict[str, Any]:
    """A flood: devices publish alerts (QoS 1) as fast as one connection can, batched as the agent
    batches them (wire.protocol.alert_batches), from a separate process whose messages are encoded before
    the clock starts; the time runs until the coordinator has stored every one (its own count of stored
    rows, so the measurement adds no load to the database). On the embedded broker the sender uses the
    coordinator's credentials: only they may write under every device's topics."""
    before = coord.alerts_ingested
    total = n_devices * per_agent
    ctx = multiprocessing.get_context("spawn")
    ready, go, counted = ctx.Event(), ctx.Event(), ctx.Event()
    sender = ctx.Process(target=_flood, args=(url, n_devices, per_agent, ready, go, counted, credentials),
                         daemon=True)
    sender.start()
    ready.wait(300)
    t0 = time.monotonic()
    go.set()
    stored = 0
    while time.monotonic() - t0 < 300:
        stored = coord.alerts_ingested - before
        if stored >= total:
            break
        time.sleep(0.01)
    seconds = time.monotonic() - t0
    counted.set()
    sender.join(timeout=30)
    return {"alerts_published": total, "alerts_stored": stored, "alert_ingestion_per_second": stored / seconds,
            "alert_ingestion_seconds": seconds}


def _flood(url: str, n_devices: int, per_agent: int, ready, go, counted, credentials: dict[str, Any]) -> None:
    import uuid

    from wire.mqtt import make_client
    from wire.protocol import agent_topic, alert_batches

    messages = []
    for d in range(n_devices):
        agent_id = f"fleet-{d:04d}"
        alerts = [{"id": uuid.uuid4().hex, "ts": time.time(), "score": 9.0, "threshold": 1.0, "model_version": 1,
                   "summary": False, "count": 1,
                   "explanation": [{"feature": "src_bytes", "share": 0.8, "value": 1.0e6, "expected": 2.0e3},
                                   {"feature": "dst_bytes", "share": 0.2, "value": 10.0, "expected": 900.0}]}
                  for _ in range(per_agent)]
        messages += [(agent_topic(agent_id, "alerts"), env.encode())
                     for env in alert_batches("fleet", 1, agent_id, alerts)]
    client, b = make_client("bench-alerts", url, clean_session=True, **credentials)  # one sends for them all
    client.max_inflight_messages_set(1000)
    client.connect(b.host, b.port)
    client.loop_start()
    ready.set()
    go.wait(300)
    sent = [client.publish(topic, payload, qos=1) for topic, payload in messages]
    for info in sent:
        info.wait_for_publish(120)
    # stay connected until the count is done: amqtt 0.12 drops the messages it has acknowledged but not
    # yet routed when their sender disconnects (with its ACL plugin, the last few hundred of a flood)
    counted.wait(300)
    client.disconnect()
    client.loop_stop()


def agent_memory(records: int = 200_000) -> dict[str, Any]:
    """Peak resident memory of a real `fedsentry agent` process scoring a CSV replay with a model."""
    from coordinator.broker import EmbeddedBroker
    from coordinator.service import Coordinator
    from models.pca.detector import PCADetector
    from models.synthetic import generate_traffic
    from wire.model import model_envelope
    from wire.mqtt import make_client
    from wire.protocol import model_topic

    tmp = Path(tempfile.mkdtemp(prefix="fedsentry-agentmem-"))
    t = generate_traffic(n_devices=40, records_per_device=500, seed=3)
    det = PCADetector(rank=3).fit(t.X_normal, t.feature_names)
    X = np.vstack([t.X_normal, t.X_attack])
    X = X[np.random.default_rng(0).integers(0, len(X), records)]
    np.savetxt(tmp / "replay.csv", X, delimiter=",", header=",".join(t.feature_names), comments="", fmt="%.6g")
    broker = EmbeddedBroker(devices=["mem-agent"]).start()
    # "delivered" means confirmed by a coordinator: the agent exits once its alerts are stored
    coordinator = Coordinator(broker.url, f"sqlite:///{tmp}/coordinator.db", username=broker.username,
                              password=broker.password).start()
    try:
        client, b = make_client("bench-publisher", broker.url, broker.username, broker.password, clean_session=True)
        client.connect(b.host, b.port)
        client.loop_start()
        env = model_envelope("bench", 1, det)
        client.publish(model_topic(), env.encode(), qos=1, retain=True).wait_for_publish(5)
        proc = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "agent", "--broker", broker.url, "--id",
                                 "mem-agent", "--csv", str(tmp / "replay.csv"), "--state-dir", str(tmp / "state"),
                                 "--wait-for-model", "--exit-after-replay"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, **broker.credentials_env("mem-agent")})
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
        coordinator.close()
        broker.close()
    return {"agent_peak_rss_mb": peak, "agent_records": records, "agent_seconds": seconds,
            "agent_records_per_second": records / seconds}


def markdown(r: dict[str, Any]) -> str:
    return "\n".join([
        "# Fleet benchmark", "", f"Command: `{r['command']}`", "",
        f"- {r['agents']} agents ({r['broker']} broker, database {r.get('database', '?')}; {PER_PROCESS} agents "
        "per process driven by one thread, one MQTT connection each), all online after "
        f"{r['startup_seconds']:.1f} s; "
        f"{r['algorithm']}, {r['fraction']:.0%} sampled per round, {r['rounds']} rounds: "
        f"median round {r['round_seconds_median']:.3f} s, slowest {r['round_seconds_max']:.3f} s "
        f"(broadcast, local steps, uploads, aggregation, store); statistics phase "
        f"{r['stats_phase_seconds']:.3f} s, threshold phase {r['threshold_phase_seconds']:.3f} s.",
        f"- Alert ingestion: a flood of {r['alerts_published']:,} alerts from {min(100, r['agents'])} devices "
        "(QoS 1, batched as agents batch them, sent from another process as fast as one connection can): "
        f"{r['alerts_stored']:,} stored in {r['alert_ingestion_seconds']:.1f} s, "
        f"{r['alert_ingestion_per_second']:,.0f} alerts/s.",
        f"- One `fedsentry agent` process replaying {r['agent_records']:,} records through a model "
        f"(scoring, explanations, alerts): peak resident memory {r['agent_peak_rss_mb']:.1f} MB, "
        f"{r['agent_records_per_second']:,.0f} records/s end to end.", ""])
