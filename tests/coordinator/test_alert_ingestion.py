"""Alert ingestion without a broker: batches as agents send them, one bad alert refused alone, redeliveries
stored once, device counters bumped per batch, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import time
import uuid

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from coordinator.service import Coordinator
from store.db import Alert, Device, session_factory
from wire.protocol import ALERTS_PER_MESSAGE, Envelope, agent_topic, alert_batches, decode


def alert(**over):
    a = {"id": uuid.uuid4().hex, "ts": time.time(), "score": 5.0, "threshold": 1.0, "count": 1,
         "explanation": [{"feature": "src_bytes", "share": 1.0, "value": 9.0, "expected": 1.0}]}
    return {**a, **over}


@pytest.fixture(params=["sqlite", "postgresql"])
def coordinator(request, tmp_path):
    sqlite = f"sqlite:///{tmp_path}/c.db"
    url = sqlite if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    c = Coordinator("mqtt://127.0.0.1:9", url)  # never started: messages are handed to it directly
    yield c
    c.engine.dispose()


def test_batches_respect_count_and_size_limits():
    many = [alert() for _ in range(250)]
    batches = alert_batches("j", 1, "dev-1", many)
    assert [len(b.meta["alerts"]) for b in batches] == [ALERTS_PER_MESSAGE, ALERTS_PER_MESSAGE, 50]
    big = [alert(explanation=[{"feature": "x" * 100, "share": 1.0, "value": 1.0, "expected": 0.0}] * 60)
           for _ in range(40)]
    for b in alert_batches("j", 1, "dev-1", big):
        assert len(b.encode()) < 64 * 1024 and decode(b.encode()).meta["alerts"]


def test_a_batch_is_stored_once_and_a_bad_alert_is_refused_alone(coordinator):
    good = [alert() for _ in range(30)]
    bad = [alert(score=float("nan")), alert(count=10**20), alert(explanation="a string"), {"id": "x"}]
    (env,) = alert_batches("job-1", 2, "dev-1", good[:15] + bad + good[15:])
    topic = agent_topic("dev-1", "alerts")
    assert coordinator.handle(topic, env.encode(), mid=1, qos=1) == "buffered"
    assert coordinator.handle(topic, env.encode(), mid=2, qos=1) == "buffered"  # a redelivery
    single = Envelope("alert", "job-1", 2, "dev-2", {}, alert())
    assert coordinator.handle(agent_topic("dev-2", "alerts"), single.encode(), mid=3, qos=1) == "buffered"
    coordinator.ingest.flush()
    with coordinator.sessions() as s:
        stored = {a.id: a for a in s.query(Alert)}
        devices = {d.id: d.alerts for d in s.query(Device)}
    assert set(stored) == {a["id"] for a in good} | {single.meta["id"]}
    assert devices == {"dev-1": 30, "dev-2": 1}
    assert stored[good[0]["id"]].model_version == 2 and stored[good[0]["id"]].explanation[0]["feature"] == "src_bytes"
    assert coordinator.rejected["alert"] == 2 * len(bad)
    # a batch of nothing but bad alerts is buffered too: their refusals are confirmed to the device (so that
    # it stops sending them) with the next flush; bad alerts without a usable id are acknowledged at once
    (env,) = alert_batches("job-1", 2, "dev-1", bad)
    assert coordinator.handle(topic, env.encode(), mid=4, qos=1) == "buffered"
    assert coordinator.ingest.refused == {"dev-1": [a["id"] for a in bad]}
    coordinator.ingest.flush()
    assert coordinator.ingest.refused == {}
    (env,) = alert_batches("job-1", 2, "dev-1", [{"id": "bad\nid", "ts": 1.0}])
    assert coordinator.handle(topic, env.encode(), mid=5, qos=1) == "done"


def test_a_device_over_its_ingest_limit_waits_and_loses_nothing(tmp_path):
    """Alerts over a device's rate are neither stored nor confirmed (the device keeps them and sends them
    again); another device's share is untouched; later, they are admitted."""
    from coordinator.ingest_limit import IngestLimit

    c = Coordinator("mqtt://127.0.0.1:9", f"sqlite:///{tmp_path}/c.db", alert_rate=10, alert_burst=20)
    try:
        flood = [alert() for _ in range(50)]
        (env,) = alert_batches("job-1", 1, "dev-1", flood)
        assert c.handle(agent_topic("dev-1", "alerts"), env.encode(), mid=1, qos=1) == "buffered"
        (other,) = alert_batches("job-1", 1, "dev-2", [alert() for _ in range(5)])
        c.handle(agent_topic("dev-2", "alerts"), other.encode(), mid=2, qos=1)
        assert c.rejected["rate_limited"] == 30
        c.ingest.flush()
        with c.sessions() as s:
            assert s.query(Alert).filter_by(device_id="dev-1").count() == 20
            assert s.query(Alert).filter_by(device_id="dev-2").count() == 5
        # the device sends again what was not confirmed; once its bucket has refilled, it is admitted
        c.ingest.limit._buckets["dev-1"] = (20.0, time.monotonic())
        (again,) = alert_batches("job-1", 1, "dev-1", flood[20:])
        c.handle(agent_topic("dev-1", "alerts"), again.encode(), mid=3, qos=1)
        c.ingest.flush()
        with c.sessions() as s:
            assert s.query(Alert).filter_by(device_id="dev-1").count() == 40
        limit = IngestLimit(10, 20)
        assert limit.take("d", 50, now=0.0) == 20 and limit.take("d", 50, now=1.0) == 10
        assert limit.take("d", 50, now=100.0) == 20  # refills up to the burst, no further
    finally:
        c.engine.dispose()


def test_no_flow_field_costs_an_alert(coordinator):
    """The traffic is the attacker's: whatever a flow field holds, the alert is stored, the field kept escaped and
    bounded or left out alone and counted (wire.flows). Before, each of these alerts was refused and lost."""
    flow = {"uid": "CHhAvVGS1DHFjwGM9", "ts": "1700000000.123456", "id.orig_h": "192.168.1.7", "id.orig_p": "51234",
            "id.resp_h": "10.0.0.1", "id.resp_p": "53", "proto": "udp", "service": "dns\\back slash"}
    good = [alert(flow=flow), alert(flow={"row": 42}), alert()]
    hostile = {
        "long": ({"uid": "x" * 300}, {"uid": "x" * 255 + "…"}, 0),
        "nested": ({"nested": {"a": 1}, "uid": "C1"}, {"uid": "C1"}, 1),
        "a list": (["uid"], None, 1),
        "17 fields": ({f"k{i}": i for i in range(17)}, {f"k{i}": i for i in range(16)}, 1),
        "a boolean": ({"row": True}, {}, 1),
        "a line break and ANSI": ({"uid": "a\nb\x1b[31m"}, {"uid": "a\\u000ab\\u001b[31m"}, 0),
        "right-to-left override": ({"service": "dns\u202etxt.exe"}, {"service": "dns\\u202etxt.exe"}, 0),
        "a bad name": ({"uid\n": "C2", "b" * 40: "v"}, {"uid\\u000a": "C2", "b" * 31 + "…": "v"}, 0),
        "2^60": ({"id.orig_p": 2**60, "uid": "C3"}, {"uid": "C3"}, 1),
    }
    bad = {name: alert(flow=sent) for name, (sent, _, _) in hostile.items()}
    (env,) = alert_batches("job-1", 1, "dev-1", good + list(bad.values()))
    assert coordinator.handle(agent_topic("dev-1", "alerts"), env.encode(), mid=1, qos=1) == "buffered"
    coordinator.ingest.flush()
    with coordinator.sessions() as s:
        stored = {a.id: a.flow for a in s.query(Alert)}
    assert len(stored) == len(good) + len(bad)
    assert [stored[a["id"]] for a in good] == [flow, {"row": 42}, None]
    for name, (_, kept, _) in hostile.items():
        assert stored[bad[name]["id"]] == kept, name
    assert coordinator.rejected["alert"] == 0
    assert coordinator.rejected["flow_field"] == sum(n for _, _, n in hostile.values())


def test_a_flush_the_database_refuses_keeps_its_batch_for_the_next(tmp_path):
    """A locked or unreachable database raises out of the flush (the worker retries after a pause); the
    batch, its refusals and its unacknowledged messages wait in memory and go with the next flush."""
    db_file = tmp_path / "c.db"
    c = Coordinator("mqtt://127.0.0.1:9", f"sqlite:///{db_file}")
    impatient = create_engine(f"sqlite:///{db_file}", connect_args={"timeout": 0})  # sees the lock at once
    c.ingest.sessions = session_factory(impatient)
    acked: list[int] = []
    confirmed: list[dict] = []
    c.ingest.ack = lambda mid, qos: acked.append(mid)
    c.ingest.publish = lambda topic, payload: confirmed.append(decode(payload).meta)
    lock = sqlite3.connect(db_file, isolation_level=None)
    try:
        good, bad = alert(), alert(score=float("nan"))
        (env,) = alert_batches("job-1", 2, "dev-1", [good, bad])
        assert c.handle(agent_topic("dev-1", "alerts"), env.encode(), mid=7, qos=1) == "buffered"
        lock.execute("BEGIN EXCLUSIVE")
        with pytest.raises(OperationalError):
            c.ingest.flush()
        assert acked == [] and confirmed == []
        lock.execute("ROLLBACK")
        c.ingest.flush()
        assert acked == [7]
        assert confirmed == [{"stored": [good["id"]], "refused": []}, {"stored": [], "refused": [bad["id"]]}]
        with c.sessions() as s:
            assert s.get(Alert, good["id"]) is not None
    finally:
        lock.close()
        impatient.dispose()
        c.engine.dispose()


def test_a_device_counter_past_32_bits_fails_no_batch(coordinator):
    """devices.alerts adds up the records alerts stand for; an incident update may stand for 2^31 - 1. On
    PostgreSQL the 32-bit counter overflowed, the batch failed and was stored row by row, that alert refused."""
    big = [alert(count=2**31 - 1) for _ in range(3)]
    (env,) = alert_batches("job-1", 2, "dev-1", big)
    assert coordinator.handle(agent_topic("dev-1", "alerts"), env.encode(), mid=1, qos=1) == "buffered"
    coordinator.ingest.flush()
    with coordinator.sessions() as s:
        assert s.query(Alert).count() == 3
        assert s.get(Device, "dev-1").alerts == 3 * (2**31 - 1)
    assert coordinator.rejected.get("alert_store", 0) == 0


def test_a_non_finite_explanation_value_is_stored_as_null_with_the_alert(coordinator):
    """A record whose features made an explanation value infinite (or NaN) is an alert like any other: the value
    is stored as null (JSON has no infinity), the alert kept. Before, it was refused and lost."""
    inf = alert(explanation=[{"feature": "duration", "share": 1.0, "value": float("inf"), "expected": float("nan")},
                             {"feature": "bytes", "share": 0.0, "value": [1.0, float("-inf")], "expected": 2.0}])
    (env,) = alert_batches("job-1", 1, "dev-1", [inf])
    assert coordinator.handle(agent_topic("dev-1", "alerts"), env.encode(), mid=1, qos=1) == "buffered"
    coordinator.ingest.flush()
    with coordinator.sessions() as s:
        (row,) = s.query(Alert).all()
    assert row.explanation == [{"feature": "duration", "share": 1.0, "value": None, "expected": None},
                               {"feature": "bytes", "share": 0.0, "value": [1.0, None], "expected": 2.0}]
    assert coordinator.rejected["alert"] == 0


def test_a_clock_ahead_is_kept_at_receipt_and_booleans_are_refused(coordinator):
    """A device whose clock runs a day ahead: its alert is stored at the time the coordinator received it, counted
    (`clock_skew`); a score of `true` is not a number."""
    ahead = alert(ts=time.time() + 20 * 3600)
    (env,) = alert_batches("job-1", 1, "dev-1", [ahead, alert(score=True), alert(count=False)])
    coordinator.handle(agent_topic("dev-1", "alerts"), env.encode(), mid=1, qos=1)
    coordinator.ingest.flush()
    with coordinator.sessions() as s:
        (row,) = s.query(Alert).all()
    assert row.id == ahead["id"] and abs((row.ts - row.received).total_seconds()) < 1
    assert coordinator.rejected["clock_skew"] == 1 and coordinator.rejected["alert"] == 2


def test_retention_drops_old_alerts_and_makes_the_partitions_ahead(coordinator):
    """The coordinator's hourly retention (store.retention, under its singleton lock): alerts older than
    retention_days go, newer ones stay; on PostgreSQL, its alerts partitioned here (opt-in, store.partitions), whole
    old days go as partitions, and the day partitions ahead are made (those converting made are dropped first, to see
    them made). One table (SQLite here, PostgreSQL's in tests/store/test_partitions.py): rows deleted."""
    from datetime import timedelta

    from store import partitions
    from store.db import utcnow

    coordinator.retention_days = 2
    old, new = alert(ts=time.time() - 5 * 86400), alert()
    today = utcnow().date()
    ahead = [today + timedelta(days=k) for k in range(1, partitions.AHEAD + 1)]
    with coordinator.sessions.begin() as s:
        if s.get_bind().dialect.name == "postgresql":
            partitions.convert(s.connection(), utcnow())
            partitions.make_days(s.connection(), today - timedelta(days=5), today - timedelta(days=5))
            for d in ahead:
                s.connection().exec_driver_sql(f"DROP TABLE {partitions.name(d)}")
    (env,) = alert_batches("job-1", 1, "dev-1", [old, new])
    coordinator.handle(agent_topic("dev-1", "alerts"), env.encode(), mid=1, qos=1)
    coordinator.ingest.flush()
    coordinator._prune()
    with coordinator.sessions() as s:
        assert [a.id for a in s.query(Alert).all()] == [new["id"]]
        if s.get_bind().dialect.name == "postgresql":
            assert partitions.partitioned(s.connection())
            days = partitions.days(s.connection())
            assert today - timedelta(days=5) not in days and set(ahead) <= set(days)
