"""Forwarding stored alerts to a SOC: webhooks (HTTP POST, one JSON alert per request) and syslog servers
(forward_syslog: RFC 5424 over UDP, or TCP with octet counting, each message within the destination's size).

Each destination has its own thread (in one coordinator of those on a database: store.singleton), reading
stored alerts in batches (never touching ingestion: alerts
are read from the database after they are stored), sending them one by one, and recording each delivery
in the database with the destination's cursor (the newest `received` time sent). A failure is retried with
a doubling back-off (1 s .. 60 s); a stopped coordinator finishes the alert in flight and records it, so a
restart neither repeats nor skips an alert. Deliveries stay recorded for WINDOW behind the cursor: an alert
committed late (out of `received` order) is still sent once. A process killed between a send and its record
may send that alert again: every webhook request carries the alert id (`Idempotency-Key`), and every syslog
message has it in STRUCTURED-DATA.

One alert never holds up the alerts after it. One the destination refuses for what it is (RefusedError: a
datagram the system finds too long, EMSGSIZE; an HTTP 413) is marked failed for that destination at once
(recorded as a failed delivery, counted in the destination's `failed`, logged once). One that keeps failing
otherwise is retried; after ATTEMPTS failures the next alert is tried too: if the destination takes that
one, the stuck alert is marked failed; if not, the destination is down, and both wait (nothing is lost in an
outage)."""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlsplit

from sqlalchemy import and_, delete, exists, select
from sqlalchemy.orm import sessionmaker

from coordinator import syslog
from store.db import Alert, ForwardDelivery, ForwardDestination, utcnow
from store.singleton import Locks

log = logging.getLogger("fedsentry.forward")
BATCH = 100  # alerts read per query
POLL = 0.2  # seconds between queries when nothing is pending
BACKOFF = (1.0, 60.0)  # seconds before a retry: first, longest
WINDOW = timedelta(minutes=10)  # how far behind its cursor a destination looks for late alerts
TIMEOUT = 10.0  # seconds for a connection or a request
ATTEMPTS = 5  # failures of one alert before the next is tried to tell a stuck alert from a destination down
#: what a webhook answers an alert it refuses for what it is (never retried)
REFUSED_STATUS = frozenset({413})
#: alert columns left out: the analyst's later actions, not the detection
PRIVATE_COLUMNS = ("acknowledged", "acknowledged_at", "acknowledged_by", "ack_note")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class DeliveryError(Exception):
    """An alert could not be delivered (retried later)."""


class RefusedError(DeliveryError):
    """The destination refuses this alert for what it is (never retried: marked failed)."""


def alert_json(row: Alert) -> dict[str, Any]:
    """The stored alert as forwarded: every column (times in RFC 3339), including those added later
    (flow fields), without the acknowledgement."""
    out: dict[str, Any] = {}
    for col in Alert.__table__.columns:
        if col.key in PRIVATE_COLUMNS:
            continue
        v = getattr(row, col.key)
        out[col.key] = syslog.rfc3339(v) if isinstance(v, datetime) else v
    return out


@dataclass
class Outcome:
    """What one pass over pending alerts did: delivered, marked failed (with the reason), and the error that
    stopped it (retried after a back-off)."""

    sent: list[Alert] = field(default_factory=list)
    failed: list[tuple[Alert, str]] = field(default_factory=list)
    error: str | None = None


class Destination(Protocol):
    key: str  # the full address (hashed into the destination's id)
    label: str  # the address without credentials, for logs and the database

    def send(self, alert: dict[str, Any], row: Alert) -> None: ...

    def close(self) -> None: ...


def _redact(url: str) -> str:
    u = urlsplit(url)
    host = u.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if u.port:
        netloc += f":{u.port}"
    return f"{u.scheme}://{netloc}{u.path}"


def parse_headers(text: str, origin: str) -> list[tuple[str, str]]:
    """`Name: value` lines (blank lines and # comments skipped); ValueError names the origin and line."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if not sep or not _HEADER_NAME.fullmatch(name.strip()):
            raise ValueError(f"{origin} line {n}: expected 'Name: value' (a header name is letters, digits, -)")
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"{origin} line {n}: a header value cannot hold control characters")
        out.append((name.strip(), value.strip()))
    return out


@dataclass
class Webhook:
    """HTTP(S) POST of each alert as a JSON object; any 2xx answer is a delivery, anything else is retried."""

    url: str
    headers: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        u = urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{self.url!r}: expected an http:// or https:// URL with a host")
        try:
            u.port  # noqa: B018 (raises on a bad port)
        except ValueError as e:
            raise ValueError(f"{self.url!r}: {e}") from None
        self.key, self.label = "webhook " + self.url, "webhook " + _redact(self.url)
        self._path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            u = urlsplit(self.url)
            cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(u.hostname or "", u.port, timeout=TIMEOUT)
        return self._conn

    def send(self, alert: dict[str, Any], row: Alert) -> None:
        body = json.dumps(alert, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "fedsentry", "Idempotency-Key": alert["id"],
                   **dict(self.headers)}
        try:
            conn = self._connection()
            conn.request("POST", self._path, body, headers)
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise DeliveryError(f"{type(e).__name__}: {e}") from None
        if resp.status in REFUSED_STATUS:
            raise RefusedError(f"HTTP {resp.status} {resp.reason}")
        if not 200 <= resp.status < 300:
            raise DeliveryError(f"HTTP {resp.status} {resp.reason}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Forwarder:
    """One thread per destination, sending every alert stored since the destination was first configured."""

    def __init__(self, sessions: sessionmaker, destinations: list[Destination], batch: int = BATCH,
                 locks: Locks | None = None):
        self.sessions, self.destinations, self.batch = sessions, destinations, batch
        #: one coordinator of those on a database sends to a destination (the others wait to take over)
        self.locks = locks or Locks(sessions.kw["bind"])
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> Forwarder:
        for dest in self.destinations:
            dest_id = hashlib.sha256(dest.key.encode()).hexdigest()
            with self.sessions.begin() as s:
                if s.get(ForwardDestination, dest_id) is None:
                    now = utcnow()
                    s.add(ForwardDestination(id=dest_id, label=dest.label[:300], since=now, cursor=now,
                                             delivered=0))
            th = threading.Thread(target=self._run, args=(dest, dest_id), name=f"forward {dest.label}",
                                  daemon=True)
            th.start()
            self.threads.append(th)
            log.info("forwarding alerts to %s", dest.label)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for th in self.threads:
            th.join(timeout=TIMEOUT + 5)

    def pending(self, dest_id: str) -> list[Alert]:
        """The oldest alerts not yet delivered to this destination, at most one batch."""
        with self.sessions() as s:
            d = s.get(ForwardDestination, dest_id)
            assert d is not None
            since = max(d.since, d.cursor - WINDOW)
            done = exists().where(and_(ForwardDelivery.destination_id == dest_id,
                                       ForwardDelivery.alert_id == Alert.id))
            return list(s.scalars(select(Alert).where(Alert.received >= since, ~done)
                                  .order_by(Alert.received, Alert.id).limit(self.batch)))

    def record(self, dest_id: str, out: Outcome) -> None:
        """Deliveries (failed ones too), cursor, counts and error in one transaction; deliveries older than the
        window dropped."""
        done = out.sent + [a for a, _ in out.failed]
        with self.sessions.begin() as s:
            d = s.get(ForwardDestination, dest_id)
            assert d is not None
            if done:
                s.add_all(ForwardDelivery(destination_id=dest_id, alert_id=a.id, received=a.received,
                                          failed=a not in out.sent) for a in done)
                d.cursor = max(d.cursor, *(a.received for a in done))
                d.delivered += len(out.sent)
                d.failed += len(out.failed)
                s.execute(delete(ForwardDelivery).where(ForwardDelivery.destination_id == dest_id,
                                                        ForwardDelivery.received < d.cursor - 2 * WINDOW))
            error = out.error or (f"alert {out.failed[-1][0].id}: {out.failed[-1][1]}" if out.failed else None)
            d.last_error = error[:300] if error else None

    def send(self, dest: Destination, rows: list[Alert], attempts: dict[str, int]) -> Outcome:
        """Send rows in order until one fails (the module's rule for refused and stuck alerts); `attempts`: the
        failures so far of the alerts that failed."""
        out = Outcome()
        stuck: tuple[Alert, str] | None = None
        for row in rows:
            if self.stop_event.is_set():
                break
            try:
                dest.send(alert_json(row), row)
            except RefusedError as e:
                out.failed.append((row, str(e)))
                continue
            except DeliveryError as e:
                out.error = str(e)
                attempts[row.id] = attempts.get(row.id, 0) + 1
                if stuck is None and attempts[row.id] >= ATTEMPTS:  # does the destination take the next one?
                    stuck = (row, f"failed {attempts[row.id]} times while the next alert was delivered: {e}")
                    continue
                break
            out.sent.append(row)
            attempts.pop(row.id, None)
            if stuck is not None:
                out.failed.append(stuck)
                attempts.pop(stuck[0].id, None)
                stuck, out.error = None, None
        return out

    def _run(self, dest: Destination, dest_id: str) -> None:
        delay = BACKOFF[0]
        attempts: dict[str, int] = {}
        alone = f"forwarding to {dest.label} ({dest_id[:12]})"
        while not self.stop_event.is_set():
            try:
                if not self.locks.held(alone):  # another coordinator on this database sends to this destination
                    self.stop_event.wait(self.locks.recheck)
                    continue
                rows = self.pending(dest_id)
                if not rows:
                    self.stop_event.wait(POLL)
                    continue
                out = self.send(dest, rows, attempts)
                self.record(dest_id, out)
                for row, reason in out.failed:
                    log.error("forwarding to %s: alert %s marked failed, not retried (%s)", dest.label, row.id,
                              reason)
                if out.error is None:
                    delay = BACKOFF[0]
                    continue
                log.warning("forwarding to %s failed (%s); %d alerts pending, retrying in %.0f s", dest.label,
                            out.error, len(rows) - len(out.sent) - len(out.failed), delay)
            except Exception:  # the database down, a bug: logged and retried, never the end of forwarding
                log.exception("forwarding to %s: unexpected error (retrying in %.0f s)", dest.label, delay)
            self.stop_event.wait(delay)
            delay = min(delay * 2, BACKOFF[1])
        self.locks.release(alone)
        dest.close()
