"""What an analyst does through the API, over SQLite and PostgreSQL: filters and pages over every stored anomaly
(not the newest page), counts of flagged records (an incident update stands for all of its records) over
time, incidents grouped by the database, and acknowledgements that record who and why, in bulk, undone."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from api.security import create_key
from store.alerts import alert_row, store_alerts
from store.db import Device, utcnow
from tests.api.conftest import bearer

NOW = time.time()


def _alert(ts: float, score: float = 5.0, count: int = 1, incident: dict | None = None, **flow) -> dict:
    return {"id": uuid.uuid4().hex, "ts": ts, "score": score, "threshold": 3.0, "count": count,
            "explanation": [{"feature": "dst_bytes", "share": 0.7, "value": 9.0, "expected": 1.0}],
            "flow": flow or None, "incident": incident}


def _update(device_ts: float, key: str, window: float, count: int, uid: str) -> dict:
    return _alert(device_ts, score=9.0, count=count, incident={
        "key": key, "window": window, "first": window + 1, "last": device_ts, "samples": [{"uid": uid}]})


def ingest(app, device: str, alerts: list[dict]) -> None:
    """Through the coordinator's own checks and bulk insert, as alerts arriving over MQTT."""
    with app.state.sessions.begin() as s:
        store_alerts(s, [alert_row(device, "job-1", 1, a, utcnow()) for a in alerts])


@pytest.fixture
def analyst(any_app):
    with any_app.state.sessions.begin() as s:
        keys = {"alice": create_key(s, "admin", "alice@soc"), "viewer": create_key(s, "viewer")}
    return TestClient(any_app), keys


def test_filters_and_pages_reach_every_stored_anomaly(any_app, analyst):
    client, keys = analyst
    # 20 alerts of one camera, buried under 600 newer alerts of other devices
    ingest(any_app, "cam-7", [_alert(NOW - 3600 - i) for i in range(20)])
    for d in range(3):
        ingest(any_app, f"dev-{d}", [_alert(NOW - i, score=1.0 + i % 7) for i in range(200)])
    h = bearer(keys["viewer"])
    page = client.get("/api/v1/anomalies", params={"device_prefix": "cam", "limit": 500}, headers=h).json()
    assert len(page["items"]) == 20 and {a["device_id"] for a in page["items"]} == {"cam-7"}
    seen, cursor = [], None
    while True:
        params = {"device_prefix": "dev-", "min_score": 4, "limit": 70, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/v1/anomalies", params=params, headers=h).json()
        seen += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    expected = 3 * sum(1 for i in range(200) if 1.0 + i % 7 >= 4)
    assert len(seen) == expected == len({a["id"] for a in seen})
    assert all(a["score"] >= 4 and a["device_id"].startswith("dev-") for a in seen)
    assert [a["ts"] for a in seen] == sorted((a["ts"] for a in seen), reverse=True)
    r = client.get("/api/v1/anomalies", params={"device_prefix": "no such\x00"}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.device_prefix"


def test_counts_are_flagged_records_over_time(any_app, analyst):
    client, keys = analyst
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    t0 = hour.timestamp()
    ingest(any_app, "dev-a", [_alert(t0 + 60), _alert(t0 + 120), _alert(t0 + 3700, count=1)])
    ingest(any_app, "dev-b", [_update(t0 + 3800, "dst_bytes+duration", t0 + 3600, 250, "C1"),
                              _update(t0 + 3801, "dst_bytes+duration", t0 + 3600, 40, "C2")])
    since, until = hour.isoformat(), (hour + timedelta(hours=2)).isoformat()
    c = client.get("/api/v1/anomalies/counts", params={"since": since, "until": until, "buckets": 4},
                   headers=bearer(keys["viewer"])).json()
    assert (c["alerts"], c["records"], c["incidents"], c["devices"]) == (5, 293, 1, 2)
    assert c["unacknowledged_records"] == 293 and c["bucket_seconds"] == 1800
    assert [p["records"] for p in c["series"]] == [2, 0, 291, 0]
    assert c["series"][2]["start"] == (hour + timedelta(hours=1)).isoformat().replace("+00:00", "Z")  # UTC, says so
    only_b = client.get("/api/v1/anomalies/counts", params={"since": since, "until": until, "device": "dev-b"},
                        headers=bearer(keys["viewer"])).json()
    assert only_b["records"] == 290 and sum(p["records"] for p in only_b["series"]) == 290
    with any_app.state.sessions() as s:  # the device list counts flagged records too, not rows
        assert {d.id: d.alerts for d in s.query(Device)} == {"dev-a": 3, "dev-b": 290}
    svg = client.get("/charts/alerts-over-time.svg", params={"since": since, "until": until},
                     headers=bearer(keys["viewer"]))
    assert svg.status_code == 200 and "UTC: 291</title>" in svg.text  # 5-minute buckets


def test_time_windows_include_since_and_exclude_until(any_app, analyst):
    """[since, until): an alert stamped exactly `until` belongs to the next window, in every view that filters."""
    client, keys = analyst
    t0 = (datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)).timestamp()
    t1 = t0 + 3600
    at_since, inside, at_until = _alert(t0), _alert(t0 + 60), _alert(t1)
    ingest(any_app, "dev-a", [at_since, inside, at_until])
    ingest(any_app, "dev-b", [_update(t1, "dst_bytes+duration", t1 - 30, 5, "C9")])  # an incident update at until
    window = {"since": datetime.fromtimestamp(t0, timezone.utc).isoformat(),
              "until": datetime.fromtimestamp(t1, timezone.utc).isoformat()}
    h = bearer(keys["viewer"])
    listed = client.get("/api/v1/anomalies", params={**window, "limit": 500}, headers=h).json()["items"]
    assert sorted(a["id"] for a in listed) == sorted(a["id"] for a in (at_since, inside))
    counts = client.get("/api/v1/anomalies/counts", params={**window, "buckets": 2}, headers=h).json()
    assert (counts["alerts"], counts["records"]) == (2, 2)
    assert client.get("/api/v1/incidents", params=window, headers=h).json()["items"] == []
    later = {"since": window["until"], "until": datetime.fromtimestamp(t1 + 60, timezone.utc).isoformat()}
    listed = client.get("/api/v1/anomalies", params={**later, "limit": 500}, headers=h).json()["items"]
    assert {a["device_id"] for a in listed} == {"dev-a", "dev-b"} and at_until["id"] in {a["id"] for a in listed}
    assert len(client.get("/api/v1/incidents", params=later, headers=h).json()["items"]) == 1


def test_acknowledge_with_who_and_why_undo_and_bulk(any_app, analyst):
    client, keys = analyst
    alerts = [_alert(NOW - i) for i in range(30)]
    ingest(any_app, "dev-a", alerts)
    alice, viewer = bearer(keys["alice"]), bearer(keys["viewer"])
    one = alerts[0]["id"]
    a = client.post(f"/api/v1/anomalies/{one}/ack", json={"note": "scanner of the IT team"}, headers=alice).json()
    assert a["acknowledged"] and a["acknowledged_by"] == "alice@soc" and a["ack_note"] == "scanner of the IT team"
    again = client.post(f"/api/v1/anomalies/{one}/ack", json={"note": "other"}, headers=alice).json()
    assert again["ack_note"] == "scanner of the IT team"  # the first acknowledgement stands
    undone = client.post(f"/api/v1/anomalies/{one}/unack", headers=alice).json()
    assert not undone["acknowledged"] and undone["acknowledged_by"] is None and undone["ack_note"] is None
    assert client.post(f"/api/v1/anomalies/{one}/unack", headers=viewer).status_code == 403
    ids = [a["id"] for a in alerts[:25]]
    r = client.post("/api/v1/anomalies/ack", json={"ids": [*ids, "unknown-id"], "note": "maintenance window"},
                    headers=alice)
    assert r.status_code == 200 and r.json() == {"changed": 25}
    left = client.get("/api/v1/anomalies", params={"acknowledged": False}, headers=viewer).json()["items"]
    assert sorted(a["id"] for a in left) == sorted(a["id"] for a in alerts[25:])
    assert client.post("/api/v1/anomalies/unack", json={"ids": ids[:5]}, headers=alice).json() == {"changed": 5}
    c = client.get("/api/v1/anomalies/counts", params={"acknowledged": False}, headers=viewer).json()
    assert c["alerts"] == 10
    # bad input names the field; nothing changes
    for body, field in (({"ids": []}, "body.ids"), ({"ids": ["x"] * 1001}, "body.ids"),
                        ({"ids": ids, "note": "a\x00b"}, "body.note"), ({"ids": ids, "note": "x" * 501}, "body.note"),
                        ({"ids": ids, "extra": 1}, "body.extra")):
        r = client.post("/api/v1/anomalies/ack", json=body, headers=alice)
        assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith(field), (body, r.text)
    assert client.post("/api/v1/anomalies/ack", json={"ids": ids}, headers=viewer).status_code == 403
    assert client.get("/api/v1/anomalies/counts", params={"acknowledged": False},
                      headers=viewer).json()["alerts"] == 10


def test_incidents_grouped_paged_and_acknowledged_as_a_whole(any_app, analyst):
    client, keys = analyst
    alice, viewer = bearer(keys["alice"]), bearer(keys["viewer"])
    for d in range(7):  # 7 devices x 2 windows x 3 updates
        updates = [_update(NOW - 600 * w - 10 + u + d, f"f{w}+g", NOW - 600 * w - 60 + d, 10 + u, f"C{d}{w}{u}")
                   for w in range(2) for u in range(3)]
        ingest(any_app, f"sensor-{d}", updates)
    ingest(any_app, "sensor-0", [_alert(NOW - 5)])  # an individual alert belongs to no incident
    seen, cursor = [], None
    while True:
        page = client.get("/api/v1/incidents", params={"limit": 4, **({"cursor": cursor} if cursor else {})},
                          headers=viewer).json()
        seen += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == 14 == len({i["id"] for i in seen})
    assert all(i["count"] == 33 and i["updates"] == 3 and len(i["samples"]) == 3 for i in seen)
    assert [i["last_update"] for i in seen] == sorted((i["last_update"] for i in seen), reverse=True)
    inc = seen[0]
    assert inc["features"] == inc["key"].split("+") and inc["first"] <= inc["last"]
    updates = client.get("/api/v1/anomalies", params={"incident": inc["id"]}, headers=viewer).json()["items"]
    assert len(updates) == 3 and sum(u["count"] for u in updates) == 33
    assert all(u["incident_id"] == inc["id"] for u in updates)
    acked = client.post(f"/api/v1/incidents/{inc['id']}/ack", json={"note": "known backup job"}, headers=alice).json()
    assert acked["acknowledged"] and acked["acknowledged_by"] == "alice@soc" and acked["ack_note"] == "known backup job"
    still_open = client.get("/api/v1/incidents", params={"acknowledged": False, "limit": 100}, headers=viewer).json()
    assert inc["id"] not in {i["id"] for i in still_open["items"]} and len(still_open["items"]) == 13
    # a later update of the same incident opens it again
    device = inc["device_id"]
    d, w = int(device.split("-")[1]), int(inc["key"][1])
    window = NOW - 600 * w - 60 + d  # as the device sent it (the API serves it to the microsecond)
    ingest(any_app, device, [_update(NOW - 1, inc["key"], window, 5, "Clate")])
    again = client.get(f"/api/v1/incidents/{inc['id']}", headers=viewer).json()
    assert not again["acknowledged"] and again["count"] == 38 and again["updates"] == 4
    assert client.post(f"/api/v1/incidents/{inc['id']}/unack", headers=alice).json()["acknowledged_by"] is None
    assert client.get(f"/api/v1/incidents/{inc['id']}", headers=viewer).json()["acknowledged_at"] is None
    only = client.get("/api/v1/incidents", params={"device": "sensor-3"}, headers=viewer).json()["items"]
    assert len(only) == 2 and {i["device_id"] for i in only} == {"sensor-3"}
    assert client.get("/api/v1/incidents/0123456789abcdef0123", headers=viewer).status_code == 404
    assert client.get("/api/v1/incidents/not-an-id", headers=viewer).status_code == 422
    assert client.post(f"/api/v1/incidents/{inc['id']}/ack", headers=viewer).status_code == 403


def test_a_device_prefix_means_the_same_on_sqlite_and_postgresql(any_app, analyst):
    """SQLite's LIKE ignores ASCII case where PostgreSQL's does not: `cam` matched `Cam-1` on SQLite only. Ids
    are case-sensitive on both now; wildcard characters in a prefix are plain characters."""
    client, keys = analyst
    t = datetime.now(timezone.utc).timestamp() - 60
    for device in ("Cam-1", "cam-2", "cam_3", "camX4"):
        ingest(any_app, device, [_alert(t)])

    def devices(prefix: str) -> list[str]:
        page = client.get("/api/v1/anomalies", params={"device_prefix": prefix}, headers=bearer(keys["viewer"]))
        assert page.status_code == 200, page.text
        return sorted(a["device_id"] for a in page.json()["items"])

    assert devices("cam") == ["cam-2", "camX4", "cam_3"]
    assert devices("cam_") == ["cam_3"]
    assert devices("Cam") == ["Cam-1"]
