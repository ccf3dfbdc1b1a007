"""Alert ingestion: the alerts agents send, stored in batches, and the rule that makes them safe: **an MQTT
message is acknowledged to the broker only after the database committed what it carried**. A coordinator killed
between the two gets the message again from the broker (persistent session, QoS 1); one that acknowledged first
would lose alerts the broker counts as delivered (tests/reliability/test_ack_after_commit.py kills one inside
the commit). Each device is then told which of its alerts are stored, or refused for good, and only then drops
them; an alert id already stored is a redelivery, stored once. A device over its ingest rate is neither stored
nor confirmed: it keeps those alerts and sends them again later."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from coordinator.ingest_limit import IngestLimit
from store.alerts import alert_id, alert_row, store_alerts
from store.db import utcnow
from store.suppress import Rules, store_held
from wire.protocol import ACK_IDS_PER_MESSAGE, Envelope, ProtocolError, agent_topic

log = logging.getLogger("fedsentry.coordinator")


class AlertIngest:
    def __init__(self, sessions: sessionmaker[Session], publish: Callable[[str, bytes], None],
                 ack: Callable[[int, int], object], reject: Callable[..., None], limit: IngestLimit):
        self.sessions, self.publish, self.ack, self.reject, self.limit = sessions, publish, ack, reject, limit
        self.rows: list[dict[str, Any]] = []  # rows waiting for their batch
        self.acks: list[tuple[int, int]] = []  # the messages they came in, acknowledged once stored
        self.refused: dict[str, list[str]] = {}  # per device, ids of alerts refused for good (confirmed too)
        self.since = 0.0  # when the oldest message waiting for a flush arrived
        self.stored = 0  # alerts stored (redeliveries not counted)
        self.rules = Rules()  # the analysts' suppression rules (store.suppress), reloaded every few seconds

    def due(self, inbox_empty: bool, batch: int, wait: float) -> bool:
        """Whether to store now: something waits and the inbox is empty (the broker waits for our
        acknowledgements, or the flood is over), the batch is full, or its oldest alert waited `wait` s."""
        return bool(self.acks) and (inbox_empty or len(self.rows) >= batch or time.monotonic() - self.since >= wait)

    def buffer(self, agent: str, env: Envelope, topic: str, mid: int, qos: int) -> tuple[str, int]:
        """Rows for the alerts of one message (one, or a batch); a malformed alert is refused alone. Returns
        "buffered" (the message is acknowledged with the flush) or "done", and how many alerts were accepted."""
        alerts = [env.meta] if env.kind == "alert" else env.meta.get("alerts")
        if not isinstance(alerts, list) or not alerts:
            raise ProtocolError("alert", "an alerts message needs a non-empty list 'alerts'")
        admitted = self.limit.take(agent, len(alerts))
        if admitted < len(alerts):  # not confirmed: the device keeps them and sends them again later
            self.reject("rate_limited", f"{agent} over {self.limit.rate:g} alerts/s", topic,
                        len(alerts) - admitted)
        now = utcnow()
        rows, refused = [], self.refused.setdefault(agent, [])
        dropped: Counter[str] = Counter()
        for a in alerts[:admitted]:
            try:
                rows.append(alert_row(agent, env.job, env.round, a, now, dropped))
            except ProtocolError as e:
                self.reject(e.reason, e.detail, topic)
                bad = alert_id(a)
                if bad:  # refused for good: confirmed, so that the device stops sending it
                    refused.append(bad)
        for reason, n in dropped.items():  # what was changed to keep the alerts (store.alerts.alert_row), counted
            if n:
                self.reject(reason, f"{n} x {reason} in {agent}'s alerts, the alerts kept", topic, n)
        if not rows and not refused:
            return "done", 0
        if not self.acks:  # the first message waiting for a flush (its alerts stored, or refusals confirmed)
            self.since = time.monotonic()
        self.rows.extend(rows)
        self.acks.append((mid, qos))
        return "buffered", len(rows)

    def flush(self) -> None:
        """Store buffered alerts in one transaction (an alert id already stored is a redelivery: skipped),
        then acknowledge them to the broker."""
        batch, acks, self.rows, self.acks = self.rows, self.acks, [], []
        refused, self.refused = self.refused, {}
        rows = list({r["id"]: r for r in batch}.values())  # the same alert twice in one batch: once
        log.debug("storing %d alerts of %d messages", len(rows), len(acks))
        try:
            with self.sessions.begin() as s:
                fresh = self.store(s, rows)
        except OperationalError:  # the database is down or locked: nothing stored, confirmed or acknowledged;
            self.rows, self.acks = batch + self.rows, acks + self.acks  # the batch waits for the next flush
            for device, ids in refused.items():
                self.refused.setdefault(device, [])[:0] = ids
            self.since = time.monotonic()
            raise
        except Exception:  # a row the database refuses: store the others one by one, refuse that one alone
            log.exception("storing a batch of %d alerts failed; storing them one by one", len(rows))
            fresh, kept = Counter(), []
            for r in rows:
                try:
                    with self.sessions.begin() as s:
                        fresh.update(self.store(s, [r]))
                    kept.append(r)
                except OperationalError:
                    raise
                except Exception as e:
                    self.reject("alert_store", f"{type(e).__name__}: {e}"[:300], agent_topic(r["device_id"], "alerts"))
                    refused.setdefault(r["device_id"], []).append(r["id"])
            rows = kept
        self.stored += sum(fresh.values())
        stored: dict[str, list[str]] = {}
        for r in rows:
            stored.setdefault(r["device_id"], []).append(r["id"])
        for device in stored.keys() | refused.keys():
            self.confirm(device, stored.get(device, []), refused.get(device, []))
        for mid, qos in acks:  # only now: what they carried is committed
            self.ack(mid, qos)

    def store(self, session: Session, rows: list[dict[str, Any]]) -> Counter[str]:
        """Alerts a suppression rule holds go to suppressed_alerts (stored, marked, out of every listing and
        forwarding), the others to alerts; the new ones per device (of the alerts table)."""
        kept, held = self.rules.hold(session, rows)
        store_held(session, held)
        return store_alerts(session, kept)

    def confirm(self, device: str, stored: list[str], refused: list[str]) -> None:
        """Tell a device which of its alerts are stored (or refused for good): only then does it drop them."""
        for key, ids in (("stored", stored), ("refused", refused)):
            for k in range(0, len(ids), ACK_IDS_PER_MESSAGE):
                meta = {"stored": [], "refused": [], key: ids[k:k + ACK_IDS_PER_MESSAGE]}
                self.publish(agent_topic(device, "ack"), Envelope("ack", "", 0, "coordinator", {}, meta).encode())
