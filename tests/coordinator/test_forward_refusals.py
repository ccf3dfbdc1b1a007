"""Forwarding hostile alerts to real receivers (issue 24, points 4 and 5): UDP and TCP syslog servers and an
HTTP server on local sockets, fed by the Forwarder from a real database. An alert with 64 KiB flow fields
reaches every syslog server within its size; one a destination refuses (EMSGSIZE, HTTP 413) or that keeps
failing while later ones go through is marked failed for that destination, counted, logged once and never
retried, and holds up neither the alerts after it nor the other destinations; a destination that is down
loses nothing."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from coordinator import forward
from coordinator.forward import Forwarder, Webhook
from coordinator.forward_syslog import Syslog
from store.alerts import alert_row, store_alerts
from store.db import Alert, ForwardDelivery, ForwardDestination, utcnow
from tests.forwarding_receivers import SyslogReceiver, WebhookReceiver, parse_rfc5424
from tests.integration.conftest import wait_until

KIB64 = 64 * 1024


pytestmark = pytest.mark.usefixtures("quick_retries")


def alert(flow: dict | None = None, **extra) -> dict:
    return {"id": uuid.uuid4().hex, "device_id": "dev-1", "job_id": "job-1", "model_version": 1,
            "ts": utcnow() - timedelta(seconds=1), "received": utcnow(), "score": 9.5, "threshold": 1.0, "count": 1,
            "explanation": [], "flow": flow, "incident": None, "acknowledged": False, **extra}


def store(sessions, *alerts: dict) -> list[str]:
    """Alerts stored one after the other (a `received` time each, in order)."""
    with sessions.begin() as s:
        for i, a in enumerate(alerts):
            s.add(Alert(**{**a, "received": a["received"] + timedelta(microseconds=i)}))
    return [a["id"] for a in alerts]


def hostile_flow() -> dict:
    """An agent's flow with 64 KiB values and keys RFC 5424 forbids as they are."""
    return {"uid": "CmES5u32sYpV7JYN", "id.orig_h": "10.0.0.7", "payload": "A" * KIB64, 'q"=] x': "]" * KIB64,
            "score": "0.0", "id": "not-the-id"}


def incident_of_64_kib() -> dict:
    """An incident update as the coordinator's own validation accepts it: 16 samples of 16 fields of 256
    printable characters (> 64 KiB of JSON)."""
    flow, now = {f"f{i}": "é" * 256 for i in range(16)}, time.time()
    return alert_row("dev-1", "job-1", 1, {"id": uuid.uuid4().hex, "ts": now, "score": 9.0, "threshold": 1.0,
                                           "count": 40, "incident": {"key": "dst_bytes", "window": now, "first": now,
                                                                     "last": now, "samples": [flow] * 16}}, utcnow())


def run(sessions, destinations):
    return Forwarder(sessions, destinations).start()


def test_alerts_of_64_kib_reach_udp_and_tcp_within_their_size_and_the_next_follow(sessions):
    udp, tcp, big = SyslogReceiver("udp"), SyslogReceiver("tcp"), SyslogReceiver("tcp")
    f = run(sessions, [Syslog(udp.url), Syslog(tcp.url), Syslog(big.url + "?max_size=1048576")])
    try:
        incident = incident_of_64_kib()
        with sessions.begin() as s:
            store_alerts(s, [incident])
        ids = [incident["id"], *store(sessions, alert(hostile_flow()), alert({"uid": "C2"}), alert())]
        for r in (udp, tcp, big):
            wait_until(lambda r=r: r.ids() == ids, 20, f"every alert, in order, at {r.url}")
    finally:
        f.stop()
        for r in (udp, tcp, big):
            r.close()
    for r, limit in ((udp, 2048), (tcp, 8192), (big, 1 << 20)):
        assert max(map(len, r.messages)) <= limit
        parsed = [parse_rfc5424(m)["sd"] for m in r.messages]
        assert all("truncated" not in p["fedsentry@32473"] for p in parsed[2:])  # the small ones whole
        flow = parsed[1]["flow@32473"]
        assert flow["uid"] == "CmES5u32sYpV7JYN" and flow["score"] == "0.0" and flow["id"] == "not-the-id"
        assert parsed[1]["fedsentry@32473"]["score"] == "9.5" and parsed[1]["fedsentry@32473"]["id"] == ids[1]
    assert "truncated" in parse_rfc5424(udp.messages[0])["sd"]["fedsentry@32473"]
    assert "truncated" not in parse_rfc5424(big.messages[0])["sd"]["fedsentry@32473"]  # 1 MiB holds it whole
    with sessions() as s:
        assert {d.delivered for d in s.scalars(select(ForwardDestination))} == {4}


def test_a_datagram_the_system_refuses_is_marked_failed_once_and_holds_up_nothing(sessions, caplog):
    """A UDP size of 65527 (IPv6's largest payload) to an IPv4 server: the system refuses a datagram over 65507
    (EMSGSIZE)."""
    udp, tcp = SyslogReceiver("udp"), SyslogReceiver("tcp")
    f = run(sessions, [Syslog(udp.url + "?max_size=65527"), Syslog(tcp.url)])
    try:
        with caplog.at_level(logging.WARNING, "fedsentry.forward"):
            # one transaction, so one batch: the refused alert's error is the batch's (last_error); stored apart,
            # a forwarder quick enough sends the later two in a batch of their own, which clears last_error
            big, *later = store(sessions, alert({"payload": "A" * KIB64}), alert({"uid": "C2"}), alert({"uid": "C3"}))
            big = [big]
            wait_until(lambda: udp.ids() == later, 20, "the later alerts over UDP")
            wait_until(lambda: tcp.ids() == big + later, 20, "every alert over TCP")
    finally:
        f.stop()
        udp.close()
        tcp.close()
    with sessions() as s:
        by_label = {d.label: d for d in s.scalars(select(ForwardDestination))}
        d = by_label[Syslog(udp.url).label]
        assert (d.delivered, d.failed) == (2, 1) and "EMSGSIZE" not in (d.last_error or "x")
        assert "Message too long" in d.last_error and big[0] in d.last_error
        assert by_label[Syslog(tcp.url).label].failed == 0
        failed = s.scalars(select(ForwardDelivery).where(ForwardDelivery.failed)).all()
        assert [x.alert_id for x in failed] == big
    marked = [r for r in caplog.records if "marked failed" in r.getMessage()]
    assert len(marked) == 1 and big[0] in marked[0].getMessage()  # logged once
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]  # never retried


def test_a_webhook_413_is_marked_failed_and_the_next_alerts_go_through(sessions):
    hook = WebhookReceiver(refuse=lambda a: 413 if a["flow"] and "payload" in a["flow"] else None)
    f = run(sessions, [Webhook(hook.url)])
    try:
        big = store(sessions, alert({"payload": "A" * KIB64}))
        later = store(sessions, alert(), alert())
        wait_until(lambda: hook.ids() == later, 20, "the later alerts")
    finally:
        f.stop()
        hook.close()
    assert [code for i, code in hook.answers if i == big[0]] == [413]  # asked once, never again
    with sessions() as s:
        assert s.scalars(select(ForwardDestination.failed)).one() == 1


def test_an_alert_that_keeps_failing_gives_way_after_its_attempts(sessions):
    """A 500 for one alert only: tried ATTEMPTS times, then the next is tried; delivered, so the stuck one is
    marked failed."""
    hook = WebhookReceiver(refuse=lambda a: 500 if a["id"] == stuck["id"] else None)
    f = run(sessions, [Webhook(hook.url)])
    try:
        stuck = alert()  # received after the destination was configured
        later = store(sessions, stuck, alert(), alert())[1:]
        wait_until(lambda: hook.ids() == later, 20, "the later alerts")
        wait_until(lambda: _failed(sessions) == [stuck["id"]], 10, "the stuck alert marked failed")
    finally:
        f.stop()
        hook.close()
    assert [code for i, code in hook.answers if i == stuck["id"]] == [500] * forward.ATTEMPTS


def test_a_destination_down_loses_nothing(sessions):
    """Every request refused for a while (more than ATTEMPTS for each alert): nothing is marked failed, every
    alert arrives once, in order, when the destination is back."""
    hook = WebhookReceiver(failures=4 * forward.ATTEMPTS)
    f = run(sessions, [Webhook(hook.url)])
    try:
        ids = store(sessions, alert(), alert(), alert())
        wait_until(lambda: hook.ids() == ids, 30, "every alert once the webhook is back")
    finally:
        f.stop()
        hook.close()
    assert hook.refused == 4 * forward.ATTEMPTS and _failed(sessions) == []


def _failed(sessions) -> list[str]:
    with sessions() as s:
        return list(s.scalars(select(ForwardDelivery.alert_id).where(ForwardDelivery.failed)))
