"""Suppression rules (issue 24, point 2), over SQLite and PostgreSQL: an admin's rule holds back the alerts and
flagged records of known traffic as the coordinator stores them (whole, marked, out of the listings, counts and
forwarding, found through the rule), can apply to what is stored already, expires, and its removal is audited."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from api.security import create_key
from coordinator.service import Coordinator
from store.db import Alert, SuppressedAlert
from tests.api.conftest import bearer
from wire.protocol import agent_topic, alert_batches

NOW = time.time()


def alert(resp_h: str = "10.0.0.1", port: int = 445, **over) -> dict:
    return {"id": uuid.uuid4().hex, "ts": NOW - 5, "score": 5.0, "threshold": 1.0, "count": 1,
            "explanation": [{"feature": "dst_bytes", "share": 1.0, "value": 9e6, "expected": 1.0}],
            "flow": {"uid": uuid.uuid4().hex[:12], "id.orig_h": "192.168.1.7", "id.resp_h": resp_h,
                     "id.resp_p": port, "service": "smb"}, **over}


def update(flows: list[tuple[str, int]]) -> dict:
    recs = [{"ts": NOW - 10 + i, "score": 6.0, "flow": {"uid": f"R{i}", "id.resp_h": h, "id.resp_p": p},
             "explanation": []} for i, (h, p) in enumerate(flows)]
    return alert(count=len(recs), records=recs,
                 incident={"key": "dst_bytes", "window": NOW - 60, "first": NOW - 10, "last": NOW - 5, "samples": []})


@pytest.fixture
def soc(any_app):
    url = str(any_app.state.sessions.kw["bind"].url.render_as_string(hide_password=False))
    coordinator = Coordinator("mqtt://127.0.0.1:9", url)  # never started: messages are handed to it directly
    coordinator.ingest.rules.refresh = 0.0
    with any_app.state.sessions.begin() as s:
        keys = {"admin": create_key(s, "admin", "alice@soc"), "viewer": create_key(s, "viewer")}
    yield TestClient(any_app), coordinator, bearer(keys["admin"]), bearer(keys["viewer"])
    coordinator.engine.dispose()


def deliver(coordinator, device: str, alerts: list[dict]) -> None:
    for env in alert_batches("job-1", 1, device, alerts):
        coordinator.handle(agent_topic(device, "alerts"), env.encode(), mid=1, qos=1)
    coordinator.ingest.flush()


def test_a_rule_holds_back_matching_alerts_and_records_as_they_arrive(soc):
    client, coordinator, admin, viewer = soc
    rule = client.post("/api/v1/suppressions", json={"reason": "nightly backup to the NAS", "cidr": "10.0.0.0/24",
                                                      "port_min": 445, "port_max": 445}, headers=admin)
    assert rule.status_code == 201, rule.text
    rule = rule.json()
    assert rule["created_by"] == "alice@soc" and rule["active"] and rule["match"]["cidr"] == "10.0.0.0/24"
    backup, other, other_port = alert(), alert("10.9.9.9"), alert(port=22)
    all_backup = update([("10.0.0.2", 445), ("10.0.0.3", 445)])
    mixed = update([("10.0.0.2", 445), ("8.8.8.8", 53)])
    deliver(coordinator, "nas-gw", [backup, other, other_port, all_backup, mixed])
    listed = {a["id"] for a in client.get("/api/v1/anomalies", headers=viewer).json()["items"]}
    assert listed == {other["id"], other_port["id"], mixed["id"]}
    held = client.get(f"/api/v1/suppressions/{rule['id']}/alerts", headers=viewer).json()["items"]
    assert {a["id"] for a in held} == {backup["id"], all_backup["id"]} and held[0]["flow"]
    assert client.get("/api/v1/suppressions", headers=viewer).json()[0]["held"] == 2
    records = client.get("/api/v1/records", headers=viewer).json()["items"]
    assert [r["flow"]["id.resp_h"] for r in records] == ["8.8.8.8"]  # the held ones are hidden by default
    every = client.get("/api/v1/records", params={"suppressed": True}, headers=viewer).json()["items"]
    assert len(every) == 4
    mine = client.get("/api/v1/records", params={"suppression": rule["id"]}, headers=viewer).json()["items"]
    assert len(mine) == 3 and all(r["flow"]["id.resp_h"].startswith("10.0.0.") for r in mine)
    counts = client.get("/api/v1/anomalies/counts", headers=viewer).json()
    assert counts["alerts"] == 3
    with coordinator.sessions() as s:  # stored whole, marked, in their own table: the forwarder reads alerts only
        assert s.get(SuppressedAlert, backup["id"]).suppression_id == rule["id"]
        assert s.get(Alert, backup["id"]) is None
    # removed: recorded, and what arrives later is no longer held
    gone = client.delete(f"/api/v1/suppressions/{rule['id']}", headers=admin).json()
    assert gone["removed_by"] == "alice@soc" and not gone["active"]
    later = alert()
    deliver(coordinator, "nas-gw", [later])
    assert later["id"] in {a["id"] for a in client.get("/api/v1/anomalies", headers=viewer).json()["items"]}


def test_a_retroactive_rule_takes_stored_alerts_out_of_the_listings(soc):
    client, coordinator, admin, viewer = soc
    old = [alert(), alert(), alert("10.9.9.9")]
    deliver(coordinator, "cam-1", old)
    deliver(coordinator, "cam-2", [alert()])
    rule = client.post("/api/v1/suppressions", json={"reason": "scanner we run", "device": "cam-1",
                                                      "cidr": "10.0.0.0/8", "service": "SMB",
                                                      "feature": "dst_bytes", "value_min": 1e6,
                                                      "retroactive": True}, headers=admin).json()
    assert (rule["retroactive"], rule["retroactive_state"]) == (0, "running")  # applied after the answer
    rule = next(r for r in client.get("/api/v1/suppressions", headers=viewer).json() if r["id"] == rule["id"])
    assert (rule["retroactive"], rule["retroactive_state"]) == (3, "done")  # cam-1's alerts to 10/8, not cam-2's
    listed = client.get("/api/v1/anomalies", headers=viewer).json()["items"]
    assert {a["device_id"] for a in listed} == {"cam-2"}
    assert len(client.get(f"/api/v1/suppressions/{rule['id']}/alerts", headers=viewer).json()["items"]) == 3


def test_a_rule_that_expired_holds_nothing_back(soc):
    client, coordinator, admin, viewer = soc
    soon = (datetime.now(timezone.utc) + timedelta(seconds=1)).isoformat()
    client.post("/api/v1/suppressions", json={"reason": "maintenance window", "device": "cam-*", "expires": soon},
                headers=admin).raise_for_status()
    first = alert()
    deliver(coordinator, "cam-3", [first])
    time.sleep(1.2)
    second = alert()
    deliver(coordinator, "cam-3", [second])
    listed = {a["id"] for a in client.get("/api/v1/anomalies", headers=viewer).json()["items"]}
    assert listed == {second["id"]}
    assert not client.get("/api/v1/suppressions", headers=viewer).json()[0]["active"]


@pytest.mark.parametrize(("body", "field"), [
    ({"reason": "x"}, "body.match"),
    ({"reason": "x", "cidr": "10.0.0.0/33"}, "body.cidr"),
    ({"reason": "x", "port_min": 100, "port_max": 10}, "body.port_min"),
    ({"reason": "x", "value_min": 1.0}, "body.feature"),
    ({"reason": "", "device": "a"}, "body.reason"),
    ({"reason": "x", "device": "a", "expires": "2001-01-01T00:00:00"}, "body.expires"),
])
def test_a_rule_that_cannot_work_is_refused_naming_its_field(soc, body, field):
    client, _, admin, _ = soc
    r = client.post("/api/v1/suppressions", json=body, headers=admin)
    assert r.status_code == 422 and field in r.text, r.text


def test_a_viewer_cannot_make_or_remove_rules(soc):
    client, _, admin, viewer = soc
    assert client.post("/api/v1/suppressions", json={"reason": "x", "device": "a"}, headers=viewer).status_code == 403
    rule = client.post("/api/v1/suppressions", json={"reason": "x", "device": "a"}, headers=admin).json()
    assert client.delete(f"/api/v1/suppressions/{rule['id']}", headers=viewer).status_code == 403
