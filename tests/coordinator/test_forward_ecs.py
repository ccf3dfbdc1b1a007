"""Alerts as Elastic Common Schema documents (issue 24, point 4): the mapping, a JSON-lines file a shipper tails
(rotation, a line too long for it refused alone), an ECS webhook, and agent-chosen field names that never reach
ECS's or the coordinator's own fields."""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from coordinator.forward import Forwarder, alert_json
from coordinator.forward_ecs import EcsFile, EcsWebhook, ecs_document
from fedsentry.cli.server import add_forward_args, forward_destinations
from fedsentry.errors import UsageError
from store.db import Alert, ForwardDelivery, utcnow
from tests.forwarding_receivers import WebhookReceiver
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.usefixtures("quick_retries")


ZEEK = {"uid": "CmES5u32sYpV7JYN", "ts": "1600000000.5", "id.orig_h": "192.168.1.20", "id.orig_p": "51234",
        "id.resp_h": "2001:db8::1", "id.resp_p": "443", "proto": "tcp", "service": "ssl"}


def alert(flow: dict | None = None, **extra) -> dict:
    return {"id": uuid.uuid4().hex, "device_id": "cam-7", "job_id": "job-1", "model_version": 3,
            "ts": utcnow() - timedelta(seconds=1), "received": utcnow(), "score": 12.5, "threshold": 5.0,
            "count": 1, "explanation": [{"feature": "orig_bytes", "share": 0.8, "value": 1.5e6, "expected": 300.0}],
            "flow": flow, "incident": None, "acknowledged": False, **extra}


def store(sessions, *alerts: dict) -> list[str]:
    with sessions.begin() as s:
        for i, a in enumerate(alerts):
            s.add(Alert(**{**a, "received": a["received"] + timedelta(microseconds=i)}))
    return [a["id"] for a in alerts]


def as_forwarded(a: dict) -> dict:
    return alert_json(Alert(**a))


def test_a_zeek_flow_maps_to_ecs_fields():
    doc = ecs_document(as_forwarded(alert(ZEEK)))
    assert doc["ecs"]["version"].startswith("8.")
    assert doc["event"]["kind"] == "alert" and doc["event"]["module"] == "fedsentry"
    assert doc["event"]["risk_score"] == 250.0  # score / threshold x 100
    assert doc["@timestamp"].endswith("Z") and doc["event"]["created"].endswith("Z")
    assert doc["source"] == {"ip": "192.168.1.20", "port": 51234}
    assert doc["destination"] == {"ip": "2001:db8::1", "port": 443}
    assert doc["network"] == {"transport": "tcp", "protocol": "ssl"}
    assert doc["observer"]["name"] == "cam-7"
    assert doc["fedsentry"]["flow"]["uid"] == "CmES5u32sYpV7JYN" and doc["fedsentry"]["score"] == 12.5
    assert "orig_bytes=1.5e+06" in doc["message"]


def test_agent_field_names_never_reach_ecs_or_coordinator_fields():
    """Flow keys that spell ECS or FedSentry fields, and values that are not what ECS says, stay in
    fedsentry.flow only."""
    hostile = {"@timestamp": "1999", "event.kind": "signal", "source.ip": "6.6.6.6", "fedsentry": {"score": 0},
               "id.orig_h": "not an ip", "id.orig_p": "99999", "id.resp_h": "10.0.0.1; DROP", "proto": "TCP\n<x>",
               "score": "0.0", "id": "not-the-id"}
    a = alert(hostile)
    doc = ecs_document(as_forwarded(a))
    assert doc["@timestamp"] != "1999" and doc["event"]["kind"] == "alert"
    assert "source" not in doc and "destination" not in doc and "network" not in doc
    assert doc["fedsentry"]["score"] == 12.5 and doc["event"]["id"] == a["id"]
    assert doc["fedsentry"]["flow"] == hostile
    assert set(doc) == {"@timestamp", "ecs", "message", "event", "observer", "rule", "fedsentry"}


def test_an_incident_update_carries_its_span_and_count():
    now = time.time()
    a = alert(ZEEK, count=40, incident={"key": "orig_bytes", "window": now, "first": now - 5, "last": now,
                                        "samples": [ZEEK]})
    doc = ecs_document(as_forwarded(a))
    assert doc["event"]["start"] == now - 5 and doc["event"]["end"] == now
    assert doc["rule"]["name"] == "fedsentry incident orig_bytes" and doc["message"].startswith("FedSentry: 40 ")


def lines(path) -> list[dict]:
    """The file's complete lines, as a shipper reads them (Filebeat and Vector wait for the newline: a line being
    written, 60,000 characters here, may be seen in part)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def test_a_file_gets_every_alert_as_one_json_line_and_follows_rotation(sessions, tmp_path):
    path = tmp_path / "alerts.ndjson"
    f = Forwarder(sessions, [EcsFile(str(path))]).start()
    try:
        first = store(sessions, alert(ZEEK), alert({"payload": "é\u202e" * 30_000}))  # 60k characters
        wait_until(lambda: path.exists() and len(lines(path)) == 2, 20, "two lines")
        os.rename(path, tmp_path / "alerts.ndjson.1")  # logrotate's default: move, then the writer reopens
        later = store(sessions, alert(ZEEK), alert(ZEEK))
        wait_until(lambda: path.exists() and len(lines(path)) == 2, 20, "the later alerts in a new file")
    finally:
        f.stop()
    assert [d["event"]["id"] for d in lines(tmp_path / "alerts.ndjson.1")] == first
    assert [d["event"]["id"] for d in lines(path)] == later


def test_a_line_too_long_for_the_shipper_is_refused_alone(sessions, tmp_path):
    path = tmp_path / "alerts.ndjson"
    f = Forwarder(sessions, [EcsFile(str(path), max_line=20_000)]).start()
    try:
        big = store(sessions, alert({"payload": "A" * 30_000}))
        later = store(sessions, alert(ZEEK), alert(ZEEK))
        wait_until(lambda: path.exists() and [d["event"]["id"] for d in lines(path)] == later, 20, "the later alerts")
    finally:
        f.stop()
    with sessions() as s:
        assert list(s.scalars(select(ForwardDelivery.alert_id).where(ForwardDelivery.failed))) == big


def test_an_ecs_webhook_receives_documents_with_the_alert_id(sessions):
    hook = WebhookReceiver()
    f = Forwarder(sessions, [EcsWebhook(hook.url)]).start()
    try:
        ids = store(sessions, alert(ZEEK), alert())
        wait_until(lambda: hook.ids() == ids, 20, "both alerts")
    finally:
        f.stop()
        hook.close()
    assert [b["event"]["id"] for b in hook.bodies] == ids
    assert hook.bodies[0]["destination"]["port"] == 443
    assert [h["Idempotency-Key"] for h in hook.headers] == ids


def test_the_flags_refuse_what_cannot_work(tmp_path):
    p = argparse.ArgumentParser()
    add_forward_args(p)
    ok = forward_destinations(p.parse_args(["--forward-ecs-file", str(tmp_path / "a.ndjson"),
                                            "--forward-ecs-webhook", "http://127.0.0.1:9/x"]))
    assert [type(d).__name__ for d in ok] == ["EcsWebhook", "EcsFile"]
    with pytest.raises(UsageError, match=r"--forward-ecs-file: .* does not exist"):
        forward_destinations(p.parse_args(["--forward-ecs-file", str(tmp_path / "nowhere" / "a.ndjson")]))
    with pytest.raises(UsageError, match=r"--forward-ecs-file: .*expected the path of a file"):
        forward_destinations(p.parse_args(["--forward-ecs-file", str(tmp_path)]))
    with pytest.raises(UsageError, match=r"--forward-ecs-webhook: .*expected an http"):
        forward_destinations(p.parse_args(["--forward-ecs-webhook", "ftp://x"]))
