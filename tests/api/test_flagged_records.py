"""Every flagged record past the alert budget is stored and findable (issue 24, point 1), over SQLite and
PostgreSQL: an incident update's records go in with it (once, however often it is redelivered), hostile content
is kept as alerts keep it and never refuses the update, and the API pages through an incident's every flow and
finds one by its Zeek uid or address."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from fastapi.testclient import TestClient

from api.security import create_key
from store.alerts import alert_row, store_alerts
from store.db import Alert, FlaggedRecord, utcnow
from tests.api.conftest import bearer

NOW = time.time()


def update(i0: int, n: int, window: float | None = None) -> dict:
    window = NOW - 60 if window is None else window
    records = [{"ts": NOW - 30 + (i0 + i) * 0.01, "score": 5.0 + (i0 + i) % 3,
                "flow": {"uid": f"C{i0 + i}", "id.orig_h": "10.0.0.9", "id.resp_h": f"192.168.0.{(i0 + i) % 4}"},
                "explanation": [{"feature": "dst_bytes", "value": 1e6, "expected": 10.0}]} for i in range(n)]
    return {"id": uuid.uuid4().hex, "ts": NOW - 1, "score": 9.0, "threshold": 3.0, "count": n, "summary": True,
            "explanation": [{"feature": "dst_bytes", "share": 1.0, "value": 1e6, "expected": 10.0}],
            "flow": {"uid": "Cworst"}, "records": records,
            "incident": {"key": "dst_bytes", "window": window, "first": NOW - 30, "last": NOW - 1, "samples": []}}


def ingest(app, device: str, alerts: list[dict], dropped: Counter | None = None) -> None:
    with app.state.sessions.begin() as s:
        store_alerts(s, [alert_row(device, "job-1", 1, a, utcnow(), dropped) for a in alerts])


@pytest.fixture
def viewer(any_app):
    with any_app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
    return TestClient(any_app), bearer(key)


def test_an_incidents_every_record_is_stored_once_and_paged_newest_first(any_app, viewer):
    client, h = viewer
    updates = [update(48 * k, 48) for k in range(5)]  # 240 records of one incident, 5 updates
    ingest(any_app, "cam-7", updates)
    ingest(any_app, "cam-7", updates[:2])  # redelivered: stored once
    with any_app.state.sessions() as s:
        assert s.query(FlaggedRecord).count() == 240
        incident = s.query(Alert.incident_id).first()[0]
    seen, cursor = [], None
    while True:
        page = client.get("/api/v1/records", params={"incident": incident, "limit": 70,
                                                     **({"cursor": cursor} if cursor else {})}, headers=h).json()
        seen += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == 240 and len({r["id"] for r in seen}) == 240
    assert [r["flow"]["uid"] for r in seen] == [f"C{i}" for i in reversed(range(240))]  # newest first
    assert seen[0]["explanation"][0]["feature"] == "dst_bytes" and seen[0]["ts"].endswith("Z")
    one = client.get("/api/v1/records", params={"uid": "C17"}, headers=h).json()["items"]
    assert [r["flow"]["uid"] for r in one] == ["C17"] and one[0]["alert_id"] == updates[0]["id"]
    by_ip = client.get("/api/v1/records", params={"ip": "192.168.0.3", "limit": 1000}, headers=h).json()["items"]
    assert len(by_ip) == 60 and all(r["flow"]["id.resp_h"] == "192.168.0.3" for r in by_ip)
    assert client.get("/api/v1/records", params={"device": "other"}, headers=h).json()["items"] == []


def test_hostile_records_are_kept_as_alerts_keep_them_and_never_refuse_the_update(any_app, viewer):
    client, h = viewer
    u = update(0, 4)
    u["records"][0]["flow"] = {"uid": "a\nb\x1b[31m", "payload": "x" * 10_000, "nested": {"a": 1}}
    u["records"][1]["explanation"] = [{"feature": "dur", "value": float("inf"), "expected": float("nan")}]
    u["records"][2] = "not a record"
    u["records"][3]["score"] = float("nan")
    u["records"] += [{"ts": 1e300, "score": 4.0, "flow": None, "explanation": "no"}]  # time out of range
    dropped: Counter = Counter()
    ingest(any_app, "cam-7", [u], dropped)
    items = client.get("/api/v1/records", params={"device": "cam-7"}, headers=h).json()["items"]
    assert len(items) == 3 and dropped["record"] == 2 and dropped["flow_field"] >= 1
    flows = {r["flow"]["uid"] if r["flow"] else None: r for r in items}
    assert "a\\u000ab\\u001b[31m" in flows and flows["a\\u000ab\\u001b[31m"]["flow"]["payload"].endswith("…")
    assert [e["value"] for r in items for e in r["explanation"] if e.get("feature") == "dur"] == [None]
    assert flows[None]["explanation"] == []
    with any_app.state.sessions() as s:
        assert s.query(Alert).count() == 1  # the update itself, whatever its records held


def test_the_records_route_refuses_what_it_cannot_answer(any_app, viewer):
    client, h = viewer
    assert client.get("/api/v1/records", params={"incident": "nope"}, headers=h).status_code == 422
    assert client.get("/api/v1/records", params={"cursor": "bad"}, headers=h).status_code == 400
    assert client.get("/api/v1/records", params={"since": "2026-01-02T00:00:00", "until": "2026-01-01T00:00:00"},
                      headers=h).status_code == 400
    assert client.get("/api/v1/records").status_code == 401


def test_a_control_character_in_a_search_is_refused_not_a_server_error(any_app, viewer):
    client, h = viewer
    for params in ({"ip": "\x00"}, {"uid": "a\nb"}, {"uid": "x" * 65}):
        assert client.get("/api/v1/records", params=params, headers=h).status_code == 422
