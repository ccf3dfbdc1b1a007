"""The clustered broker of the scale-out issue (27, point 1): three RabbitMQ nodes of the test's own, MQTT 3.1.1,
per-device topic permissions, quorum queues for durable sessions. A device writes only under its own name; a QoS 1
message queued for a device whose node dies reaches it on another node; agents on different nodes hear the
coordinator on a third."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from coordinator.queue_ingest import QUEUE, STATUS_QUEUE, UPLOAD_QUEUE
from store.db import Alert, Device, make_engine
from tests.integration.conftest import wait_until
from tests.rabbitmq_cluster import HAVE_RABBITMQ, RabbitCluster
from wire.protocol import Envelope, agent_topic, alert_batches, job_topic

pytestmark = pytest.mark.skipif(not HAVE_RABBITMQ, reason="rabbitmq-server is not installed")


@pytest.fixture(scope="module")
def cluster():
    with RabbitCluster(3) as c:
        c.add_user("coordinator", admin=True)
        for d in ("dev-a", "dev-b"):
            c.add_user(d)
        yield c


def client(cluster: RabbitCluster, node: int, user: str,
           clean: bool = True) -> tuple[mqtt.Client, list, threading.Event]:
    got: list[tuple[str, bytes]] = []
    lost = threading.Event()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user, clean_session=clean,
                    protocol=mqtt.MQTTv311)
    c.username_pw_set(user, cluster.passwords[user])
    answer: dict = {}
    c.on_connect = lambda cl, u, flags, reason, props=None: answer.setdefault("reason", reason)
    c.on_message = lambda cl, u, m: got.append((m.topic, m.payload))
    c.on_disconnect = lambda *a: lost.set()
    c.connect("127.0.0.1", cluster.nodes[node]["mqtt"])
    c.loop_start()
    wait_until(lambda: "reason" in answer, 20, f"{user} connected to node {node}")
    assert not answer["reason"].is_failure, answer["reason"]
    return c, got, lost


def close(*clients: mqtt.Client) -> None:
    for c in clients:
        c.disconnect()
        c.loop_stop()


def test_a_device_writes_only_under_its_own_name(cluster):
    coord, heard, _ = client(cluster, 0, "coordinator")
    coord.subscribe("fedsentry/v1/agents/+/+", qos=1)
    a, _, a_lost = client(cluster, 1, "dev-a")
    try:
        time.sleep(1)  # the subscriptions are in place
        a.publish(agent_topic("dev-a", "status"), b"mine", qos=1).wait_for_publish(10)
        wait_until(lambda: (agent_topic("dev-a", "status"), b"mine") in heard, 20, "dev-a's own status")
        a.publish(agent_topic("dev-b", "status"), b"forged", qos=1)
        wait_until(a_lost.is_set, 20, "the broker to close the connection of a device writing as another")
        assert (agent_topic("dev-b", "status"), b"forged") not in heard
    finally:
        close(coord, a)


def test_agents_on_other_nodes_hear_the_coordinator_and_a_session_outlives_its_node(cluster):
    a, a_got, _ = client(cluster, 1, "dev-a", clean=False)
    b, b_got, _ = client(cluster, 2, "dev-b")
    coord, _, _ = client(cluster, 0, "coordinator")
    try:
        for c in (a, b):
            c.subscribe(job_topic("j1"), qos=1)
        time.sleep(1)  # the subscriptions are in place
        coord.publish(job_topic("j1"), b"round 1", qos=1).wait_for_publish(10)
        wait_until(lambda: (job_topic("j1"), b"round 1") in a_got and (job_topic("j1"), b"round 1") in b_got, 20,
                   "both agents to hear round 1")
        close(a)  # dev-a goes away with a durable session; its node then dies
        cluster.stop_node(1)
        coord.publish(job_topic("j1"), b"round 2", qos=1).wait_for_publish(10)
        again, again_got, _ = client(cluster, 2, "dev-a", clean=False)
        try:
            wait_until(lambda: (job_topic("j1"), b"round 2") in again_got, 30,
                       "the round queued while dev-a was away, on another node")
        finally:
            close(again)
    finally:
        close(coord, b)


def _ingest_worker(cluster: RabbitCluster, name: str, db: str, log) -> subprocess.Popen:
    password = cluster.passwords["coordinator"]
    amqp = " ".join(f"amqp://coordinator:{password}@127.0.0.1:{n['amqp']}/%2F" for n in cluster.nodes)
    return subprocess.Popen(
        [sys.executable, "-m", "fedsentry.cli", "coordinator", "--role", "ingest", "--client-id", name,
         "--ingest-workers", "2", "--username", "coordinator", "--db", db,
         "--broker", f"mqtt://127.0.0.1:{cluster.nodes[0]['mqtt']}"],
        env={**os.environ, "FEDSENTRY_QUEUE_URLS": amqp, "FEDSENTRY_MQTT_PASSWORD": password},
        stdout=subprocess.DEVNULL, stderr=log)


def test_statuses_go_through_the_queue_to_one_worker_at_a_time_which_another_replaces(cluster, postgres_url,
                                                                                     tmp_path):
    """Issue 27, point 2 (device status through the queue): ingest workers store devices' statuses from the quorum
    queue `fedsentry.status`, with what each device can do (coordinator.status), read by one worker at a time so a
    device's statuses are stored in the order it sent them; SIGKILL that worker mid-flood and the other stores the
    newest."""
    for i in range(3):
        if cluster.procs[i].poll() is not None:  # an earlier test stopped it
            cluster.start_node(i)
    engine = make_engine(postgres_url)

    def consumers() -> list[tuple[str, str]]:  # (channel, active) of the status queue's consumers
        out = cluster.ctl(0, "list_consumers", "queue_name", "channel_pid", "active", "--quiet",
                          "--no-table-headers")
        return [tuple(line.split()[1:3]) for line in out.splitlines() if line.split()[:1] == [STATUS_QUEUE]]

    def stored() -> Device | None:
        with Session(engine) as s:
            return s.get(Device, "dev-a")

    def status(version: int, online: bool = True) -> bytes:
        return Envelope("status", "", 0, "dev-a", {}, {
            "online": online, "jobs": ["gmm"], "abilities": ["dp"], "features": ["bytes", "dur"],
            "model": {"job": "j", "version": version, "status": "loaded"}}).encode()

    first = _ingest_worker(cluster, "ing-first", postgres_url, (tmp_path / "first.log").open("w"))
    workers = [first]
    dev, _, _ = client(cluster, 1, "dev-a")
    try:
        wait_until(lambda: len(consumers()) == 1, 60, "the first worker reading the status queue")
        workers.append(_ingest_worker(cluster, "ing-second", postgres_url, (tmp_path / "second.log").open("w")))
        wait_until(lambda: len(consumers()) == 2, 60, "the second worker reading the status queue")
        assert sorted(active for _, active in consumers()) == ["false", "true"]  # one reads, one stands by
        for v in range(1, 301):
            dev.publish(agent_topic("dev-a", "status"), status(v), qos=1)
        wait_until(lambda: (d := stored()) is not None and d.model_status["version"] == 300, 60,
                   "the newest of 300 statuses stored")
        d = stored()
        assert d.online and d.capabilities == {"jobs": ["gmm"], "abilities": ["dp"], "features": ["bytes", "dur"]}

        os.kill(first.pid, signal.SIGKILL)  # the active one (the first to read the queue)
        first.wait()
        for v in range(301, 401):
            dev.publish(agent_topic("dev-a", "status"), status(v), qos=1)
        dev.publish(agent_topic("dev-a", "status"), status(400, online=False), qos=1).wait_for_publish(10)
        wait_until(lambda: (d := stored()) is not None and not d.online, 60,
                   "the standby worker storing the statuses sent after the first was killed")
        assert stored().model_status["version"] == 400
        assert [active for _, active in consumers()] == ["true"]
    finally:
        close(dev)
        for p in workers:
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=30)
        engine.dispose()


def _queue_leader(cluster: RabbitCluster, up: int) -> int:
    """The node that leads the alert queue (asked of a running node)."""
    out = cluster.ctl(up, "list_queues", "name", "leader", "--quiet", "--no-table-headers")
    name = next(line.split()[1] for line in out.splitlines() if line.split()[:1] == [QUEUE])
    return next(i for i, n in enumerate(cluster.nodes) if n["name"] == name)


def test_two_ingest_workers_a_worker_and_the_queue_leader_killed_store_every_alert_once(cluster, postgres_url,
                                                                                          tmp_path):
    """Issue 27, point 2: two `--role ingest` processes read the alerts from a quorum queue; one is SIGKILLed, then
    the queue leader's node stops: exactly 20,000 alerts are stored."""
    if cluster.procs[1].poll() is not None:  # the test before stopped it
        cluster.start_node(1)
    password = cluster.passwords["coordinator"]
    amqp = [f"amqp://coordinator:{password}@127.0.0.1:{n['amqp']}/%2F" for n in cluster.nodes]
    workers = {}
    for name, order in (("ing-a", [0, 1, 2]), ("ing-b", [2, 0, 1])):
        env = {**os.environ, "FEDSENTRY_QUEUE_URLS": " ".join(amqp[i] for i in order),
               "FEDSENTRY_MQTT_PASSWORD": password}
        workers[name] = subprocess.Popen(
            [sys.executable, "-m", "fedsentry.cli", "coordinator", "--role", "ingest", "--client-id", name,
             "--ingest-workers", "2", "--username", "coordinator", "--db", postgres_url,
             "--broker", f"mqtt://127.0.0.1:{cluster.nodes[order[0]]['mqtt']}"],
            env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / f"{name}.log").open("w"))
    engine = make_engine(postgres_url)

    def stored() -> int:
        with Session(engine) as s:
            return s.scalar(select(func.count()).select_from(Alert)) or 0

    def queue(column: str) -> int:
        out = cluster.ctl(0, "list_queues", "name", column, "--quiet", "--no-table-headers")
        return sum(int(line.split()[1]) for line in out.splitlines() if line.split()[:1] == [QUEUE])

    devices = [f"dev-{i:02d}" for i in range(20)]
    messages = [alert_batches("j", 1, d, [{"id": f"{d}-{k}", "ts": time.time(), "score": 5.0, "threshold": 1.0,
                                           "count": 1} for k in range(1000)]) for d in devices]
    batches = [b for per_device in zip(*messages, strict=True) for b in per_device]  # the devices interleaved
    try:
        wait_until(lambda: queue("consumers") == 2, 60, "both workers reading the queue")
        leader = _queue_leader(cluster, 0)
        sender, _, _ = client(cluster, next(i for i in range(3) if i != leader), "coordinator")
        half = len(batches) // 2
        with engine.connect() as locked:  # the workers take the first half and cannot store any of it yet
            locked.execute(text("LOCK TABLE alerts IN ACCESS EXCLUSIVE MODE"))
            for b in batches[:half]:
                sender.publish(agent_topic(b.sender, "alerts"), b.encode(), qos=1).wait_for_publish(10)
            wait_until(lambda: queue("messages_ready") == 0, 30, "the first half taken by the workers")
            time.sleep(1)  # and in their hands
            os.kill(workers["ing-a"].pid, signal.SIGKILL)  # with alerts it had taken and not stored
            workers["ing-a"].wait()
            locked.rollback()
        for b in batches[half:]:
            sender.publish(agent_topic(b.sender, "alerts"), b.encode(), qos=1).wait_for_publish(10)
        cluster.stop_node(leader)
        wait_until(lambda: stored() >= 20_000, 120, "every alert stored")
        time.sleep(3)  # redeliveries settle: nothing more arrives
        assert stored() == 20_000, (tmp_path / "ing-b.log").read_text()[-2000:]
        close(sender)
    finally:
        for p in workers.values():
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=30)
        engine.dispose()


def test_bench_ingest_times_one_and_two_workers_and_prints_their_ratio(cluster, postgres_url, tmp_path):
    """`fedsentry bench ingest` runs real workers on scratch databases and reports each count's rate and the ratio
    (the README's figure comes from a longer run of the same command)."""
    if cluster.procs[0].poll() is not None:
        cluster.start_node(0)
    amqp = f"amqp://coordinator:{cluster.passwords['coordinator']}@127.0.0.1:{cluster.nodes[0]['amqp']}/%2F"
    out = subprocess.run(
        [sys.executable, "-m", "fedsentry.cli", "bench", "ingest", "--queue", amqp, "--postgres", postgres_url,
         "--alerts", "600", "--devices", "6", "--out", str(tmp_path), "--json", "-"],
        capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert [r["workers"] for r in result["runs"]] == [1, 2]
    assert result["runs"][0]["timed_alerts"] > 0 and result["runs"][0]["ratio"] == 1.0
    assert all(r["alerts_per_s"] > 0 for r in result["runs"]) and result["runs"][1]["ratio"] > 0
    assert "| 2 |" in (tmp_path / "ingest-workers.md").read_text()


def test_answers_go_through_the_queue_and_a_private_job_equals_the_simulator(cluster, postgres_url, tmp_path,
                                                                             traffic):
    """Issue 27, point 2: the answers to rounds go through the ingest workers' quorum queue. A private PCA job
    (every kind of answer: statistics, keys, shares, masked uploads, and the revealed shares that are never stored)
    with a `--role driver --queue` process that subscribes to no answers, one `--role ingest` worker and four agents
    on a third node: each answer the driver took came from round_uploads, but the revealed shares, which the worker
    passed on unstored; the model is the simulator's private mode's."""
    pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")
    from models.families import job_spec
    from models.pca.simulator import simulate_pca
    from store.db import Job, session_factory
    from store.jobs import create_job
    from tests.integration.conftest import Fleet, finished, parts_for

    for i, p in enumerate(cluster.procs):  # a test before may have stopped one
        if p.poll() is not None:
            cluster.start_node(i)
    n, rank, seed = 4, 3, 1
    devices = [f"qd-{i}" for i in range(n)]
    for d in devices:
        cluster.add_user(d)
    password = cluster.passwords["coordinator"]
    amqp = " ".join(f"amqp://coordinator:{password}@127.0.0.1:{node['amqp']}/%2F" for node in cluster.nodes)
    log = (tmp_path / "ingest.log").open("w")
    worker = _ingest_worker(cluster, "ing-q", postgres_url, log)
    driver = subprocess.Popen(
        [sys.executable, "-m", "fedsentry.cli", "coordinator", "--role", "driver", "--client-id", "drv-q",
         "--username", "coordinator", "--db", postgres_url, "--broker", f"mqtt://127.0.0.1:{cluster.nodes[1]['mqtt']}"],
        env={**os.environ, "FEDSENTRY_QUEUE_URLS": amqp, "FEDSENTRY_MQTT_PASSWORD": password},
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "driver.log").open("w"))
    data, split = traffic
    parts = parts_for(split, n)
    fleet = Fleet(f"mqtt://127.0.0.1:{cluster.nodes[2]['mqtt']}", tmp_path)
    engine = make_engine(postgres_url)

    def reading(queue: str) -> bool:
        out = cluster.ctl(0, "list_consumers", "queue_name", "--quiet", "--no-table-headers")
        return queue in out.split()

    try:  # the worker made its queues (what agents publish before is not routed to them)
        wait_until(lambda: reading(UPLOAD_QUEUE) and reading(STATUS_QUEUE), 60, "the worker reading its queues")
        for d, p in zip(devices, parts, strict=True):
            fleet.add(d, p, data.feature_names, username=d, password=cluster.passwords[d])

        def online() -> int:  # the coordinators make the tables as they start
            with Session(engine) as s:
                try:
                    return s.scalar(select(func.count()).select_from(Device).where(Device.online)) or 0
                except ProgrammingError:
                    return 0

        wait_until(lambda: online() == n, 60, "the agents online")
        create_job(session_factory(engine), "pq", job_spec("pca", {
            "algorithm": "fedmm", "features": data.feature_names, "rank": rank, "seed": seed, "private": True,
            "min_agents": n, "deadline": 30.0}))

        def status() -> str:
            with Session(engine) as s:
                return s.get(Job, "pq").status

        done = finished(lambda: Session(engine), "pq", status, 120, "the private job through the queue")
        rounds, Z, threshold = done.rounds, done.arrays["Z"], done.info["threshold"]
    finally:
        fleet.close()
        for p in (driver, worker):
            p.send_signal(signal.SIGTERM)
        for p in (driver, worker):
            p.wait(timeout=30)
        engine.dispose()
    unmask = [r for r in rounds if r.phase.endswith(":unmask")]
    stored = [r for r in rounds if not r.phase.endswith(":unmask")]
    assert unmask and stored
    for r in stored:  # every answer the driver took came from the table the worker stored it in
        took = r.metrics.get("queued", 0) + r.metrics.get("restored", 0)
        assert r.answered and took == len(r.answered), (r.phase, r.metrics)
    for r in unmask:  # the revealed shares were passed on, never stored
        assert len(r.answered) == n and not r.metrics.get("queued") and not r.metrics.get("restored"), r.metrics
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, rank=rank, seed=seed, private=True)
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert threshold == pytest.approx(sim["threshold"], rel=1e-6)
