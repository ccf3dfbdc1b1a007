"""Alerts end to end, exactly once (issue 10): an agent SIGKILLed while it follows a Zeek log, the
coordinator SIGKILLed three times behind a Mosquitto whose queue drops most of a 3,000-alert backlog, and
poison-pill alerts published among honest ones. Every flagged record is stored once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from sqlalchemy import func
from sqlalchemy.orm import Session

from coordinator.broker import Mosquitto
from edge_agent.sources import ZEEK_FIELDS, Batch
from models.detection.preprocessing import Preprocessor
from models.pca.detector import PCADetector
from store.db import Alert, ModelVersion, Rejection, make_engine, unpack
from tests.integration.conftest import HAVE_MOSQUITTO, parts_for, wait_until
from tests.reliability.test_crashes import create_job, start_coordinator, status
from wire.protocol import Envelope, agent_topic, alert_batches, decode

pytestmark = pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed")
N = 4


def zeek_line(names: list[str], row: np.ndarray) -> str:
    """A record as a Zeek JSON conn.log line (the agent maps it back to the model's features)."""
    v = dict(zip(names, row.tolist()))
    rec = {zeek: v[model] for zeek, model in ZEEK_FIELDS.items()}
    rec["proto"] = "tcp" if v["proto_tcp"] else ("udp" if v["proto_udp"] else "icmp")
    rec["conn_state"] = "REJ" if v["conn_rejected"] else "SF"
    return json.dumps(rec)


def detector(engine, job_id: str) -> PCADetector:
    with Session(engine) as s:
        mv = s.query(ModelVersion).filter_by(job_id=job_id).one()
    a = unpack(mv.arrays)
    pre = Preprocessor(mv.info["features"], a["log_mask"].astype(bool), a["mean"], a["scale"])
    return PCADetector.from_model(a["Z"], pre, mv.info["threshold"])


def stored(engine, device: str) -> tuple[int, int, int]:
    """(rows, distinct ids, flagged records counted) of a device's stored alerts."""
    with Session(engine) as s:
        rows = s.query(func.count(Alert.id), func.count(func.distinct(Alert.id)),
                       func.coalesce(func.sum(Alert.count), 0)).filter(Alert.device_id == device).one()
    return int(rows[0]), int(rows[1]), int(rows[2])


def start_agent(url: str, agent_id: str, log: Path, state: Path, burst: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "agent", "--broker", url, "--id", agent_id,
                             "--zeek", str(log), "--state-dir", str(state), "--alert-burst", str(burst),
                             "--alert-window", "1", "--wait-for-model"],
                            stdout=subprocess.DEVNULL, stderr=open(state.parent / f"{agent_id}.log", "a"))


@pytest.mark.parametrize("burst", [1_000_000, 50], ids=["every-record-an-alert", "rate-limited"])
def test_an_agent_sigkilled_while_following_a_zeek_log_loses_and_repeats_nothing(broker, coordinator, fleet,
                                                                                   traffic, tmp_path, burst):
    """With burst 50 per second, most flagged records leave as counts in summaries: the suppressed counts
    survive the kills too (saved with the position)."""
    data, split = traffic
    for i, p in enumerate(parts_for(split, N)):
        fleet.add(f"dev-{i}", p, data.feature_names)
    wait_until(lambda: len(coordinator.online_devices()) == N, 30, "agents online")
    coordinator.create_job("warm", "pca", "fedmm", {"features": data.feature_names, "rounds": 3, "fraction": 1.0,
                                                    "min_agents": N})
    wait_until(lambda: coordinator.job_status("warm") == "finished", 60, "a model")
    det = detector(coordinator.engine, "warm")
    pool = np.vstack([split.X_test[split.y_test == 1], split.X_test[split.y_test == 0]])
    records = pool[np.random.default_rng(0).integers(0, len(pool), 40_000)]
    flagged = int((det.score_samples(records) > det.threshold_).sum())
    log, state = tmp_path / "conn.log", tmp_path / "z-1"
    log.write_text("")
    proc = start_agent(broker.url, "z-1", log, state, burst)
    wait_until(lambda: "z-1" in coordinator.online_devices(), 30, "the agent online")
    rng = random.Random(3)
    try:
        for k, idx in enumerate(np.array_split(np.arange(len(records)), 4)):
            with open(log, "a") as f:  # 10,000 records at once: the agent is busy reading, scoring, sending
                f.writelines(zeek_line(data.feature_names, records[i]) + "\n" for i in idx)
            if k < 3:  # SIGKILL at a random moment of that work
                time.sleep(rng.uniform(0.01, 0.3))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                wait_until(lambda: "z-1" not in coordinator.online_devices(), 30, "the last will")
                proc = start_agent(broker.url, "z-1", log, state, burst)
                wait_until(lambda: "z-1" in coordinator.online_devices(), 30, "the agent back")
            else:
                time.sleep(0.5)
        wait_until(lambda: stored(coordinator.engine, "z-1")[2] >= flagged, 90, "every flagged record stored")
        time.sleep(1.5)  # anything sent twice would arrive now
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    rows, distinct, counted = stored(coordinator.engine, "z-1")
    print(f"agent SIGKILLed 3 times: {flagged} records flagged of {len(records)}; {rows} alerts stored "
          f"({distinct} distinct) counting {counted} records")
    assert flagged > 100
    assert rows == distinct
    assert counted == flagged
    assert rows == flagged if burst > flagged else rows < flagged / 2


def default_mosquitto() -> Mosquitto:
    """Mosquitto with its default in-flight window (20) and a queue of 10 messages per offline client (the
    default is 1,000 messages, here 100 alerts each): what drops a coordinator's backlog while it is down."""
    m = Mosquitto()
    m.config = (f"listener {m.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
                f"persistence_location {m.dir}/\nmax_queued_messages 10\n")
    return m.start()


def test_coordinator_sigkilled_three_times_behind_a_small_broker_queue_with_a_3000_alert_backlog(traffic, tmp_path):
    from tests.integration.conftest import Fleet

    data, split = traffic
    broker = default_mosquitto()
    fleet = Fleet(broker.url, tmp_path)
    db = f"sqlite:///{tmp_path}/c.db"
    engine = make_engine(db)
    proc = start_coordinator(broker.url, db)
    try:
        for i, p in enumerate(parts_for(split, N)):
            fleet.add(f"dev-{i}", p, data.feature_names)
        create_job(db, "warm", data.feature_names, rounds=3)
        wait_until(lambda: status(engine, "warm") == "finished", 60, "a model")
        wait_until(lambda: fleet.agents["dev-0"].scorer.detector is not None, 30, "the model published")
        det = detector(engine, "warm")
        pool = np.vstack([split.X_test, split.X_test[split.y_test == 1]])
        flagged_pool = pool[det.score_samples(pool) > det.threshold_]
        records = flagged_pool[np.random.default_rng(1).integers(0, len(flagged_pool), 3000)]

        def stream():
            for i in range(0, len(records), 100):
                time.sleep(0.05)
                yield Batch(data.feature_names, records[i:i + 100])

        watcher = fleet.add("cam-1", None, data.feature_names, source=stream(), wait_for_model=True,
                            alert_burst=1_000_000)
        rng = random.Random(11)
        os.kill(proc.pid, signal.SIGKILL)  # down while the backlog builds: the broker keeps 10 messages of it
        proc.wait()
        wait_until(lambda: watcher.counters["records"] == len(records), 60, "the backlog raised")
        for _ in range(3):
            proc = start_coordinator(broker.url, db)
            time.sleep(rng.uniform(0.3, 1.5))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        proc = start_coordinator(broker.url, db)
        wait_until(lambda: len(watcher.outbox) == 0, 120, "every alert confirmed by the coordinator")
        time.sleep(1.0)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        fleet.close()
        broker.close()
    rows, distinct, counted = stored(engine, "cam-1")
    print(f"coordinator SIGKILLed 3 times, Mosquitto queue of 10 messages: {watcher.counters['alerts']} alerts raised, "
          f"{rows} stored ({distinct} distinct)")
    assert watcher.counters["alerts"] == len(records)
    assert rows == distinct == counted == len(records)


def test_poison_pill_alerts_are_refused_alone_and_the_coordinator_keeps_storing(broker, coordinator, tmp_path):
    """NaN scores, counts beyond an integer column, a string explanation, a newline in an id, garbage bytes:
    published (one retained) among honest batches from the same device. Each pill is refused and counted,
    refusals with a usable id are confirmed to the sender, every honest alert is stored once, and a
    restarted coordinator that gets the retained pill again keeps going."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="pill-1")
    confirmed: list[dict] = []
    client.on_message = lambda c, u, m: confirmed.append(decode(m.payload).meta)
    subscribed = threading.Event()
    client.on_subscribe = lambda *a: subscribed.set()
    client.connect("127.0.0.1", broker.port)
    client.subscribe(agent_topic("pill-1", "ack"), qos=1)
    client.loop_start()
    assert subscribed.wait(10)  # confirmations sent before the subscription would be lost to this test
    # and the coordinator's own subscription is in place once it has seen this device's status (a raw client
    # does not resend what nobody received, as an agent would)
    online = Envelope("status", "", 0, "pill-1", {}, {"online": True})
    client.publish(agent_topic("pill-1", "status"), online.encode(), qos=1, retain=True)  # as agents do
    wait_until(lambda: "pill-1" in coordinator.online_devices(), 30, "the coordinator subscribed")

    def alert(**kw):
        a = {"id": os.urandom(8).hex(), "ts": time.time(), "score": 5.0, "threshold": 1.0, "count": 1,
             "explanation": [{"feature": "src_bytes", "share": 0.9}]}
        return {**a, **kw}

    # an explanation value that is not finite is not a pill: stored as null with its alert (issue 24)
    honest = [alert() for _ in range(249)] + [alert(explanation=[{"x": float("nan")}])]
    pills = [alert(score=float("nan")), alert(count=10**20), alert(explanation="a string"),
             alert(score=float("inf")), alert(ts=1e30)]
    topic = agent_topic("pill-1", "alerts")
    try:
        for batch in alert_batches("warm", 1, "pill-1", honest[:120] + pills[1:] + honest[120:]):
            client.publish(topic, batch.encode(), qos=1).wait_for_publish(5)
        retained = Envelope("alerts", "warm", 1, "pill-1", {}, {"alerts": [pills[0]]})  # survives on the broker
        client.publish(topic, retained.encode(), qos=1, retain=True).wait_for_publish(5)
        client.publish(topic, b"\x00garbage", qos=1).wait_for_publish(5)
        bad_id = Envelope("alerts", "warm", 1, "pill-1", {}, {"alerts": [alert(id="x\ndata: {}")]})
        client.publish(topic, bad_id.encode(), qos=1).wait_for_publish(5)
        wait_until(lambda: stored(coordinator.engine, "pill-1")[0] == len(honest), 30, "honest alerts stored")
        wait_until(lambda: {i for m in confirmed for i in m["refused"]} == {p["id"] for p in pills}, 10,
                   "refusals confirmed")
        assert {i for m in confirmed for i in m["stored"]} == {a["id"] for a in honest}
        assert coordinator.thread.is_alive()
        def refused_stored() -> dict[str, int]:
            with coordinator.sessions() as s:
                return {r.reason: r.count for r in s.query(Rejection)}

        # the worker stores its counts within a second (housekeeping); wait for them, never flush by hand
        wait_until(lambda: refused_stored() == dict(coordinator.rejected), 10, "rejection counts stored")
        refused = refused_stored()
        assert refused.get("alert", 0) >= len(pills) + 1 and refused.get("malformed", 0) >= 1
        # a new coordinator life on the same database and broker gets the retained pill again: still fine
        from coordinator.service import Coordinator

        coordinator.close()
        again = Coordinator(broker.url, f"sqlite:///{tmp_path}/coordinator.db").start()
        try:
            wait_until(lambda: again.rejected["alert"] >= 1, 15, "the retained pill refused again")
            assert again.thread.is_alive()
            assert stored(again.engine, "pill-1")[:2] == (len(honest), len(honest))
        finally:
            again.close()
    finally:
        client.loop_stop()
        client.disconnect()
