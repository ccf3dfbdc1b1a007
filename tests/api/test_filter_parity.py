"""Every filter means the same on SQLite and PostgreSQL (issue 24, point 7): ids and job names are compared with
their case, `_` and `.` in a prefix are plain characters, a score or time on the boundary is in (since, min_score)
or out (until) on both, and an address finds its flows whichever way it is written. Each answer is checked
against the same filter evaluated in Python over the alerts the test stored, so that both databases agree with
it and not merely with each other."""

from __future__ import annotations

import ipaddress
import itertools
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from api.security import create_key
from store.alerts import alert_row, store_alerts
from store.db import utcnow
from tests.api.conftest import bearer

DEVICES = ("Cam-1", "cam-1", "cam_1", "camX1", "cam.1", "CAM-1")
JOBS = ("job-a", "Job-A")
BASE = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None) - timedelta(hours=2)


@pytest.fixture
def stored(any_app):
    """Alerts of every device and job, on whole seconds, some on the score boundary, every third acknowledged."""
    with any_app.state.sessions.begin() as s:
        key = create_key(s, "admin", "alice@soc")
    alerts = []
    for i, (device, job) in enumerate(itertools.product(DEVICES, JOBS)):
        for k in range(4):
            ts = BASE + timedelta(minutes=7 * i + k)
            score = (4.0, 4.0 - 1e-9, 4.5, 9.0)[k]
            a = {"id": uuid.uuid4().hex, "ts": ts.replace(tzinfo=timezone.utc).timestamp(), "score": score,
                 "threshold": 3.0, "count": 1, "explanation": [], "flow": None, "incident": None}
            with any_app.state.sessions.begin() as s:
                store_alerts(s, [alert_row(device, job, 1, a, utcnow())])
            alerts.append({"id": a["id"], "device": device, "job": job, "ts": ts, "score": score,
                           "acknowledged": (len(alerts) % 3) == 0})
    client = TestClient(any_app)
    acked = [a["id"] for a in alerts if a["acknowledged"]]
    done = client.post("/api/v1/anomalies/ack", json={"ids": acked}, headers=bearer(key)).json()
    assert done["changed"] == len(acked)
    return client, bearer(key), alerts


def _oracle(alerts: list[dict], f: dict) -> set[str]:
    def keep(a: dict) -> bool:
        return ((f.get("device") is None or a["device"] == f["device"])
                and (f.get("device_prefix") is None or a["device"].startswith(f["device_prefix"]))
                and (f.get("job") is None or a["job"] == f["job"])
                and (f.get("since") is None or a["ts"] >= f["since"])
                and (f.get("until") is None or a["ts"] < f["until"])
                and (f.get("min_score") is None or a["score"] >= f["min_score"])
                and (f.get("acknowledged") is None or a["acknowledged"] == f["acknowledged"]))
    return {a["id"] for a in alerts if keep(a)}


FILTERS = [
    {"device": "cam-1"}, {"device": "CAM-1"}, {"device": "cam_1"},
    {"device_prefix": "cam"}, {"device_prefix": "Cam"}, {"device_prefix": "CAM"}, {"device_prefix": "cam_"},
    {"device_prefix": "cam."}, {"device_prefix": "c"},
    {"job": "job-a"}, {"job": "Job-A"}, {"job": "JOB-A"},
    {"min_score": 4.0}, {"min_score": 4.5},
    {"acknowledged": True}, {"acknowledged": False, "device_prefix": "cam", "job": "Job-A"},
    {"since": BASE + timedelta(minutes=21), "until": BASE + timedelta(minutes=49)},
    {"since": BASE + timedelta(minutes=22), "until": BASE + timedelta(minutes=22, seconds=1)},
]


def _id(f: dict) -> str:
    """A filter's test id, times as offsets from BASE: pytest-xdist's workers import this module at different
    moments and must collect the same ids."""
    return ",".join(f"{k}=BASE+{(v - BASE).total_seconds():g}s" if isinstance(v, datetime) else f"{k}={v}"
                    for k, v in f.items())


@pytest.mark.parametrize("f", FILTERS, ids=_id)
def test_every_filter_answers_as_python_does_on_both_databases(stored, f):
    client, h, alerts = stored
    params = {k: (v.isoformat() if isinstance(v, datetime) else str(v).lower() if isinstance(v, bool) else v)
              for k, v in f.items()}
    want = _oracle(alerts, f)
    got, cursor = [], None
    while True:
        page = client.get("/api/v1/anomalies", params={**params, "limit": 7, **({"cursor": cursor} if cursor else {})},
                          headers=h)
        assert page.status_code == 200, page.text
        got += [a["id"] for a in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if not cursor:
            break
    assert len(got) == len(set(got)) and set(got) == want
    window = {"since": (BASE - timedelta(hours=1)).isoformat(), "until": (BASE + timedelta(hours=3)).isoformat()}
    counts = client.get("/api/v1/anomalies/counts", params={**window, **params}, headers=h)
    assert counts.status_code == 200, counts.text
    assert counts.json()["alerts"] == len(want) == sum(p["records"] for p in counts.json()["series"])
    assert counts.json()["devices"] == len({a["device"] for a in alerts if a["id"] in want})


def test_an_address_finds_its_flows_however_it_is_written(any_app):
    """Addresses are stored and searched in one canonical text (IPv6 compressed, lower case): the flows of
    2001:DB8:0::1 are found by 2001:db8::1 and the other way round, on both databases; a text that is no address
    is matched as it was given."""
    with any_app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
    now = datetime.now(timezone.utc).timestamp()
    ends = [("2001:DB8:0::1", "10.0.0.1"), ("10.0.0.2", "2001:db8::1"), ("fe80::A", "not-an-address"),
            ("10.0.0.3", "Not-An-Address")]
    records = [{"ts": now - 30 + i, "score": 5.0, "flow": {"uid": f"C{i}", "id.orig_h": o, "id.resp_h": r},
                "explanation": []} for i, (o, r) in enumerate(ends)]
    update = {"id": uuid.uuid4().hex, "ts": now - 1, "score": 9.0, "threshold": 3.0, "count": len(records),
              "summary": True, "explanation": [], "flow": None, "records": records,
              "incident": {"key": "x", "window": now - 60, "first": now - 30, "last": now - 1, "samples": []}}
    with any_app.state.sessions.begin() as s:
        store_alerts(s, [alert_row("cam-7", "job-1", 1, update, utcnow())])
    client = TestClient(any_app)

    def uids(ip: str) -> list[str]:
        page = client.get("/api/v1/records", params={"ip": ip}, headers=bearer(key))
        assert page.status_code == 200, page.text
        return sorted(r["flow"]["uid"] for r in page.json()["items"])

    assert uids("2001:db8::1") == uids("2001:DB8:0:0:0:0:0:1") == ["C0", "C1"]
    assert uids("FE80::a") == ["C2"]
    assert uids("not-an-address") == ["C2"] and uids("Not-An-Address") == ["C3"]
    assert uids("10.0.0.3") == ["C3"]
    shown = client.get("/api/v1/records", params={"uid": "C0"}, headers=bearer(key)).json()["items"][0]
    assert shown["flow"]["id.orig_h"] == "2001:DB8:0::1"  # the flow itself is shown as the device sent it


def test_the_migration_rewrites_addresses_stored_before_it(any_app):
    """0014 puts the addresses stored before canonical texts in canonical form, IPv6 only, leaving other texts."""
    from importlib import import_module

    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import insert, select

    from store.db import FlaggedRecord

    rows = [("2001:DB8:0::1", "10.0.0.1"), ("fe80::A", "Not:An:Address"), ("10.0.0.2", "::FFFF:10.0.0.3")]
    with any_app.state.sessions.begin() as s:  # as an older coordinator stored them: the texts as sent
        s.execute(insert(FlaggedRecord), [
            {"id": f"r{i}", "alert_id": "a", "device_id": "cam-7", "incident_id": None, "ts": BASE, "score": 5.0,
             "threshold": 3.0, "explanation": [], "flow": {}, "uid": f"C{i}", "orig_h": o, "resp_h": r,
             "suppression_id": None} for i, (o, r) in enumerate(rows)])
    m = import_module("store.migrations.versions.0014_canonical_addresses")
    m.BATCH = 2  # more than one batch
    with any_app.state.sessions.begin() as s, Operations.context(MigrationContext.configure(s.connection())):
        m.upgrade()
    with any_app.state.sessions() as s:
        got = s.execute(select(FlaggedRecord.orig_h, FlaggedRecord.resp_h).order_by(FlaggedRecord.id)).all()
    assert [tuple(r) for r in got] == [("2001:db8::1", "10.0.0.1"), ("fe80::a", "Not:An:Address"),
                                       ("10.0.0.2", str(ipaddress.ip_address("::ffff:10.0.0.3")))]
