"""False-positive feedback (issue 24, point 3) through the API, over SQLite and PostgreSQL: an admin marks an alert,
a flagged record or a whole incident; the coordinator sends the device the scores of what is marked, and writes the
effect the device reports onto the action; undoing is recorded and sends the list without it; a viewer key can do
none of it, and input that cannot work is a 4xx naming what is wrong."""

from __future__ import annotations

import pytest

from coordinator.feedback import publish_feedback
from store.db import FlaggedRecord
from tests.api.test_suppressions import alert, deliver, update
from tests.api.test_suppressions import soc as soc  # the fixture
from wire.feedback import Feedback, feedback_topic
from wire.messages import read
from wire.protocol import Envelope, agent_topic, decode


def sent(coordinator) -> dict[str, Feedback]:
    """What the coordinator publishes now: each device's feedback, read as the device reads it."""
    out: dict[str, tuple[bytes, bool]] = {}
    publish_feedback(coordinator.sessions, lambda topic, payload, retain: out.__setitem__(topic, (payload, retain)))
    assert all(retain for _, retain in out.values())  # retained: a device that restarts gets it from the broker
    return {t: read(Feedback, decode(p)).check() for t, (p, _) in out.items()}


def test_marking_sends_the_device_the_marked_scores_and_undoing_takes_them_back(soc):
    client, coordinator, admin, viewer = soc
    single, other = alert(score=7.5), alert(score=3.0)
    incident = update([("10.0.0.2", 445), ("10.0.0.3", 445)])
    deliver(coordinator, "cam-1", [single, other, incident])
    r = client.post("/api/v1/feedback", json={"alert": single["id"], "reason": "the NAS backup"}, headers=admin)
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["device_id"] == "cam-1" and first["created_by"] == "alice@soc" and first["records"] == 1
    assert first["effect"] is None and "not reported yet" in first["training"] and not first["delivered"]
    with coordinator.sessions() as s:
        incident_id = s.query(FlaggedRecord).filter_by(alert_id=incident["id"]).first().incident_id
    second = client.post("/api/v1/feedback", json={"incident": incident_id, "reason": "scanner we run"},
                         headers=admin).json()
    assert second["records"] == 2  # the update's worst record is one of its two (score 5 vs 6: both kept)
    msg = sent(coordinator)[feedback_topic("cam-1")]
    assert msg.actions == [first["id"], second["id"]] and msg.models == ["job-1:1"]
    assert sorted(msg.scores.tolist()) == [5.0, 6.0, 7.5]
    assert msg.scores[msg.action == 0].tolist() == [7.5]
    assert sent(coordinator) == {}  # sent once per change
    assert client.get("/api/v1/feedback", headers=viewer).json()[1]["delivered"]
    # the device reports the effect in its status: written onto its own actions, shown
    effect = {"before": 1.0, "after": 7.5, "cap": 8.0, "capped": False, "records": 1, "stale": 0, "trained": 0}
    report = {"model": "job-1:1", "base": 1.0, "threshold": 7.5, "cap": 8.0, "training": False,
              "actions": {first["id"]: effect, "f" * 32: effect}}
    status = Envelope("status", "", 0, "cam-1", {}, {"online": True, "feedback": report})
    coordinator.handle(agent_topic("cam-1", "status"), status.encode())
    shown = {f["id"]: f for f in client.get("/api/v1/feedback", params={"device": "cam-1"}, headers=viewer).json()}
    assert shown[first["id"]]["effect"]["after"] == 7.5 and shown[first["id"]]["effect"]["model"] == "job-1:1"
    assert "did not consent" in shown[first["id"]]["training"]
    # undone: recorded, and the device is sent the list without it
    gone = client.delete(f"/api/v1/feedback/{first['id']}", headers=admin).json()
    assert not gone["active"] and gone["removed_by"] == "alice@soc"
    msg = sent(coordinator)[feedback_topic("cam-1")]
    assert msg.actions == [second["id"]] and 7.5 not in msg.scores.tolist()


def test_a_flagged_record_can_be_marked_alone(soc):
    client, coordinator, admin, viewer = soc
    incident = update([("10.0.0.2", 445), ("10.0.0.3", 445)])
    deliver(coordinator, "cam-2", [incident])
    record = client.get("/api/v1/records", headers=viewer).json()["items"][0]
    r = client.post("/api/v1/feedback", json={"record": record["id"], "reason": "printer"}, headers=admin)
    assert r.status_code == 201 and r.json()["records"] == 1, r.text
    assert sent(coordinator)[feedback_topic("cam-2")].scores.tolist() == [record["score"]]


def test_a_viewer_can_read_feedback_but_not_mark_or_undo(soc):
    client, coordinator, admin, viewer = soc
    a = alert()
    deliver(coordinator, "cam-3", [a])
    refused = client.post("/api/v1/feedback", json={"alert": a["id"], "reason": "x"}, headers=viewer)
    assert refused.status_code == 403 and "admin role" in refused.text
    fb = client.post("/api/v1/feedback", json={"alert": a["id"], "reason": "x"}, headers=admin).json()
    assert client.delete(f"/api/v1/feedback/{fb['id']}", headers=viewer).status_code == 403
    assert client.get("/api/v1/feedback", headers=viewer).json()[0]["active"]


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"reason": "x"}, 422, "exactly one"),
    ({"reason": "x", "alert": "a", "incident": "0" * 20}, 422, "exactly one"),
    ({"reason": "", "alert": "KNOWN"}, 422, "body.reason"),
    ({"reason": "x", "incident": "not-an-incident"}, 422, "incident"),
    ({"reason": "x", "alert": "KNOWN", "score": 1e9}, 422, "score"),
    ({"reason": "x", "alert": "no-such-alert"}, 404, "no alert"),
    ({"reason": "x", "incident": "0" * 20}, 404, "no incident"),
    ({"reason": "x", "record": "ab" * 20}, 404, "no flagged record"),
])
def test_feedback_that_cannot_work_is_refused_saying_why(soc, body, status, says):
    client, coordinator, admin, _ = soc
    a = alert()
    deliver(coordinator, "cam-4", [a])
    body = {k: (a["id"] if v == "KNOWN" else v) for k, v in body.items()}
    r = client.post("/api/v1/feedback", json=body, headers=admin)
    assert r.status_code == status and says in r.text, r.text


def test_the_same_target_twice_and_unknown_actions_are_refused(soc):
    client, coordinator, admin, _ = soc
    a = alert()
    deliver(coordinator, "cam-5", [a])
    first = client.post("/api/v1/feedback", json={"alert": a["id"], "reason": "x"}, headers=admin).json()
    again = client.post("/api/v1/feedback", json={"alert": a["id"], "reason": "x"}, headers=admin)
    assert again.status_code == 409 and first["id"] in again.text
    assert client.delete("/api/v1/feedback/" + "0" * 32, headers=admin).status_code == 404
    assert client.delete("/api/v1/feedback/nope", headers=admin).status_code == 422


def test_a_device_report_that_is_not_one_changes_nothing(soc):
    client, coordinator, admin, viewer = soc
    a = alert()
    deliver(coordinator, "cam-6", [a])
    fb = client.post("/api/v1/feedback", json={"alert": a["id"], "reason": "x"}, headers=admin).json()
    bad = {"model": "job-1:1", "training": True, "actions": {fb["id"]: {"before": 1.0, "after": float("inf")}}}
    for device in ("cam-6", "cam-7"):  # malformed, and another device reporting on cam-6's action
        report = bad if device == "cam-6" else {**bad, "actions": {fb["id"]: {
            "before": 1.0, "after": 2.0, "cap": 2.0, "capped": False, "records": 1, "stale": 0, "trained": 0}}}
        status = Envelope("status", "", 0, device, {}, {"online": True, "feedback": report})
        coordinator.handle(agent_topic(device, "status"), status.encode())
    assert client.get("/api/v1/feedback", headers=viewer).json()[0]["effect"] is None
