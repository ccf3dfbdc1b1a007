"""The coordinator acknowledges an MQTT message only after the database committed what it carried.

Devices keep alerts until the coordinator confirms them, so an end-to-end test cannot tell an early broker
acknowledgement from a late one: the device would send again. Here the sender is a plain MQTT client that
never resends, the coordinator is a real process caught (by its own stack dump) inside the commit of the
alert, which a lock on the database holds open, and it is killed there. Only the broker's redelivery of the
unacknowledged message, to the next coordinator with the same session, can store the alert."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt

from coordinator.service import Coordinator
from store.db import Alert, make_engine, migrate
from tests.integration.conftest import wait_until
from wire.mqtt import parse_broker_url
from wire.protocol import Envelope, agent_topic


def publisher(url: str) -> mqtt.Client:
    b = parse_broker_url(url)
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="plain-sender", protocol=mqtt.MQTTv311)
    c.connect(b.host, b.port)
    c.loop_start()
    return c


def flushes(log: str) -> int:
    """How many flushes the coordinator has begun (its debug log, coordinator/ingest.py AlertIngest.flush). A log
    line, not a stack dump: dumping every thread's stack on a signal, many times a second under load, once ended
    the coordinator's process in the middle of a dump."""
    return Path(log).read_text().count("storing 1 alerts of 1 messages")


def send(sender: mqtt.Client) -> dict:
    """One alert from dev-1, published once (QoS 1) and never again."""
    alert = {"id": uuid.uuid4().hex, "ts": time.time(), "score": 5.0, "threshold": 1.0, "count": 1,
             "explanation": [{"feature": "src_bytes", "share": 1.0, "value": 9.0, "expected": 1.0}]}
    env = Envelope("alert", "job-1", 1, "dev-1", {}, alert)
    sender.publish(agent_topic("dev-1", "alerts"), env.encode(), qos=1).wait_for_publish(10)
    return alert


def stored_in(db_file: Path, alert: dict) -> bool:
    with sqlite3.connect(db_file) as conn:
        return conn.execute("SELECT 1 FROM alerts WHERE id = ?", (alert["id"],)).fetchone() is not None


def test_a_coordinator_killed_before_its_commit_gets_the_alert_again_from_the_broker(broker, tmp_path):
    db_file = tmp_path / "c.db"
    db = f"sqlite:///{db_file}"
    engine = make_engine(db)
    migrate(engine)
    engine.dispose()
    log = str(tmp_path / "coordinator.log")
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "coordinator", "--broker", broker.url,
                                 "--db", db, "-v"], stdout=subprocess.DEVNULL, stderr=err)
    sender = publisher(broker.url)
    lock = sqlite3.connect(db_file, timeout=30, isolation_level=None)
    try:
        wait_until(lambda: "coordinator connected" in Path(log).read_text(), 60, "the coordinator to connect")
        # a first alert, stored as usual, shows the coordinator's subscription is in place (a message
        # published before it would reach no one, and nothing would be stored for a reason unrelated to this)
        first = send(sender)
        wait_until(lambda: stored_in(db_file, first), 30, "a first alert to be stored")
        lock.execute("BEGIN EXCLUSIVE")  # every write of the coordinator now waits (up to its 30 s timeout)
        alert = send(sender)
        try:
            # the second flush is the second alert's: it waits on the lock, before its commit
            wait_until(lambda: flushes(log) >= 2, 25, "the coordinator to be storing the alert")
        except AssertionError as e:
            raise AssertionError(f"{e}; the coordinator's log ends:\n{Path(log).read_text()[-3000:]}") from None
        proc.kill()  # inside the commit: a crash between receiving and storing
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        lock.execute("ROLLBACK") if lock.in_transaction else None
        lock.close()
        sender.loop_stop()
        sender.disconnect()
    c = Coordinator(broker.url, db).start()  # the same client id (the default), so the same broker session
    try:
        def stored() -> bool:
            with c.sessions() as s:
                return s.get(Alert, alert["id"]) is not None
        wait_until(stored, 30, "the broker's redelivery to be stored")
    finally:
        c.close()
