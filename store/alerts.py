"""Storing alerts in bulk: one multi-row INSERT per batch, a redelivered alert (same id) skipped by the
database itself (ON CONFLICT DO NOTHING), and each device's counter bumped once per batch.

This is the coordinator's hot path under an alert flood: a few statements per batch, whatever its size,
on SQLite and PostgreSQL alike."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.orm import Session

from store.db import Alert, Device, utcnow
from store.records import insert_for, record_rows, store_records
from wire.flows import clean_flow, escaped, finite
from wire.protocol import ProtocolError

#: an alert id as agents make them (hex uuids): nothing that could break a log line, a CSV or an event stream
ALERT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: alert times accepted: 2000-01-01 .. a day from now (an agent's clock may be a little ahead)
EARLIEST = 946684800.0
#: how far ahead of the coordinator a device's clock may be: an alert time beyond it is stored as the time the
#: coordinator received it (the alert kept, counted as `clock_skew`), so no device sorts its alerts above today's
CLOCK_SKEW = 300.0


def alert_id(m: Any) -> str | None:
    """The id of an alert if it has a well-formed one (a refusal can then be confirmed to the agent)."""
    i = m.get("id") if isinstance(m, dict) else None
    return i if isinstance(i, str) and ALERT_ID.fullmatch(i) else None


def alert_row(agent: str, job: str, version: int, m: Any, received: datetime,
              dropped: Counter[str] | None = None) -> dict[str, Any]:
    """The table row of one alert as an agent sent it; ProtocolError when a field the alert needs is missing or
    wrong. Its flow fields (and its incident's example flows) are the traffic's, chosen by whoever sends it: they
    are kept as `wire.flows.clean_flow` keeps them, never a reason to refuse the alert. `dropped` counts, by
    reason, what was changed to keep the alert: flow fields left out (`flow_field`), an incident update's records
    left out (`record`), a time ahead of the coordinator's set to the time received (`clock_skew`)."""
    if alert_id(m) is None:
        raise ProtocolError("alert", "alert id must be 1-64 letters, digits or _.:-")
    if any(isinstance(m.get(k), bool) for k in ("ts", "score", "threshold", "count")):
        raise ProtocolError("alert", "ts, score, threshold and count must be numbers, not true or false")
    try:
        ts = float(m["ts"])
        if not EARLIEST <= ts <= time.time() + 86400:
            raise ValueError(f"time {ts!r} outside 2000-01-01 .. tomorrow")
        row: dict[str, Any] = {
               "id": m["id"], "device_id": agent, "job_id": job, "model_version": int(version),
               "ts": datetime.fromtimestamp(ts, timezone.utc).replace(tzinfo=None),
               "received": received, "score": float(m["score"]), "threshold": float(m["threshold"]),
               "count": int(m.get("count", 1)), "explanation": list(m.get("explanation", [])),
               "flow": m.get("flow"), "incident": m.get("incident"), "acknowledged": False}
    except (KeyError, TypeError, ValueError, OverflowError, OSError, AttributeError) as e:
        raise ProtocolError("alert", f"malformed alert: {e}") from None
    received_at = received.replace(tzinfo=timezone.utc).timestamp()
    if ts > received_at + CLOCK_SKEW:  # a device clock ahead: kept, at receipt
        row["ts"], row["clock_skew"] = received, True
        if dropped is not None:
            dropped["clock_skew"] += 1
    # what would break the database or the readers: non-finite numbers, counts beyond an integer column,
    # explanations that are not a short list of objects
    if not (math.isfinite(row["score"]) and math.isfinite(row["threshold"])):
        raise ProtocolError("alert", "score and threshold must be finite numbers")
    if not 1 <= row["count"] < 2**31:
        raise ProtocolError("alert", f"count {row['count']} outside 1..2^31-1")
    if len(row["explanation"]) > 64 or not all(isinstance(e, dict) for e in row["explanation"]):
        raise ProtocolError("alert", "explanation must be a list of at most 64 objects")
    # a value the record's features made infinite (or NaN) is stored as null: the record is kept
    try:
        row["explanation"] = [finite(e) for e in row["explanation"]]
    except RecursionError:
        raise ProtocolError("alert", "explanation nested too deeply") from None
    try:  # finite numbers only (the readers serve JSON), and a bounded size
        text = json.dumps(row["explanation"], allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ProtocolError("alert", f"explanation is not plain JSON with finite numbers: {e}") from None
    if len(text) > 16384:
        raise ProtocolError("alert", "explanation larger than 16 KiB")
    row["flow"], lost = clean_flow(row["flow"])
    if isinstance(row["incident"], dict) and isinstance(row["incident"].get("samples"), list):
        samples = [clean_flow(f) for f in row["incident"]["samples"][:16]]
        lost += sum(n for _, n in samples) + max(0, len(row["incident"]["samples"]) - 16)
        row["incident"] = {**row["incident"], "samples": [f for f, _ in samples if f is not None]}
        if isinstance(row["incident"].get("key"), str):
            row["incident"]["key"] = escaped(row["incident"]["key"], 200)
    if lost and dropped is not None:
        dropped["flow_field"] += lost
    problem = incident_problem(row["incident"])
    if problem:
        raise ProtocolError("alert", problem)
    row["incident_id"] = incident_id(agent, row["incident"])
    # the records an incident update counts, each kept whole (store.records)
    # (at the update's time when a record's is out of range: the same clock rule)
    row["records"] = record_rows(row, m.get("records"), EARLIEST, received_at + CLOCK_SKEW, dropped) \
        if row["incident"] is not None else []
    return row


def incident_id(device: str, incident: Any) -> str | None:
    """The id of the incident an update belongs to: the device, the features that explain it and its
    rate-limit window, hashed (20 hex digits). None for an alert that is not an incident update."""
    if not isinstance(incident, dict) or incident_problem(incident):
        return None
    text = json.dumps([device, incident["key"], float(incident["window"])])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def incident_problem(incident: Any) -> str | None:
    """Why an incident update cannot be stored: a key, a window and first/last times, and at most 16 example
    flows (each as an alert's flow)."""
    if incident is None:
        return None
    if not isinstance(incident, dict) or set(incident) - {"key", "window", "first", "last", "samples"}:
        return "incident must be an object with key, window, first, last and samples"
    key, samples = incident.get("key"), incident.get("samples", [])
    if not (isinstance(key, str) and 0 < len(key) <= 200 and key.isprintable()):
        return "incident key must be printable text of at most 200 characters"
    for t in ("window", "first", "last"):
        v = incident.get(t)
        if isinstance(v, bool) or not isinstance(v, int | float) or not EARLIEST <= v <= time.time() + 86400:
            return f"incident {t} must be a time between 2000-01-01 and tomorrow"
    if not isinstance(samples, list) or len(samples) > 16:
        return "incident samples must be a list of at most 16 flows"
    return next((p for p in map(flow_problem, samples) if p), None)


def flow_problem(flow: Any) -> str | None:
    """Why an alert's flow fields (its record's connection: uid, addresses, ports, ...) cannot be stored."""
    if flow is None:
        return None
    if not isinstance(flow, dict) or len(flow) > 16:
        return "flow must be an object of at most 16 fields"
    for k, v in flow.items():
        if not (isinstance(k, str) and 0 < len(k) <= 32 and k.isprintable()):
            return "flow field names must be printable text of at most 32 characters"
        number = isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53
        text = isinstance(v, str) and len(v) <= 256 and v.isprintable()
        if not (number or text):
            return f"flow field {k!r} must be a whole number or printable text of at most 256 characters"
    return None


COLUMNS = ("id", "device_id", "job_id", "model_version", "ts", "received", "score", "threshold", "count",
           "explanation", "flow", "incident", "incident_id", "acknowledged")


def store_alerts(session: Session, rows: Sequence[dict[str, Any]]) -> Counter[str]:
    """Insert the alerts that are not stored yet; return how many were new per device. Each device's
    `alerts` counter grows by the flagged records they hold (an incident update counts all of its own)."""
    insert = insert_for(session)
    fresh: Counter[str] = Counter()
    if not rows:
        return fresh
    if session.get_bind().dialect.name == "postgresql":
        new = _copy_postgresql(session, rows)
    else:  # one cached statement, executed as multi-row VALUES batches ("insertmanyvalues")
        stmt = insert(Alert).on_conflict_do_nothing(index_elements=["id"]).returning(Alert.id, Alert.device_id,
                                                                                       Alert.count)
        new = [(i, d, n) for i, d, n in session.execute(stmt, [{k: r[k] for k in COLUMNS} for r in rows])]
    stored = {i for i, _, _ in new}  # a redelivered alert's records are stored already
    store_records(session, [rec for r in rows if r["id"] in stored for rec in r.get("records", ())])
    records: Counter[str] = Counter()
    for _, device, n in new:
        fresh[device] += 1
        records[device] += n
    count_alerts(session, records)
    return fresh


def count_alerts(session: Session, records: Counter[str]) -> None:
    """Bump each device's `alerts` counter by the flagged records its new alerts hold (a device not known yet is
    added, online): one upsert per device, as one cached statement."""
    if not records:
        return
    now = utcnow()
    stmt = insert_for(session)(Device)
    stmt = stmt.on_conflict_do_update(index_elements=["id"], set_={
        "alerts": Device.alerts + stmt.excluded.alerts, "last_seen": stmt.excluded.last_seen})
    session.execute(stmt, [{"id": d, "online": True, "alerts": n, "rounds": 0, "first_seen": now,
                            "last_seen": now} for d, n in records.items()])


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_line(r: dict[str, Any]) -> str:
    """One row in COPY's text format (tab-separated, backslash escapes)."""
    return "\t".join((
        r["id"].translate(_COPY_ESCAPES), r["device_id"].translate(_COPY_ESCAPES), r["job_id"].translate(_COPY_ESCAPES),
        str(r["model_version"]), r["ts"].isoformat(), r["received"].isoformat(), repr(r["score"]),
        repr(r["threshold"]), str(r["count"]), json.dumps(r["explanation"]).translate(_COPY_ESCAPES),
        "\\N" if r["flow"] is None else json.dumps(r["flow"]).translate(_COPY_ESCAPES),
        "\\N" if r["incident"] is None else json.dumps(r["incident"]).translate(_COPY_ESCAPES),
        "\\N" if r.get("incident_id") is None else r["incident_id"],
        "t" if r["acknowledged"] else "f")) + "\n"


def _copy_postgresql(session: Session, rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """COPY the batch into a temporary table, then move the new ones over: an order of magnitude faster
    than parameterised INSERTs, and a redelivered alert is still skipped by the primary key: `id` of the default
    table, (id, ts) of alerts partitioned by day (store.partitions, opt-in), hence ON CONFLICT naming neither.

    An alert stored at its receipt (a device clock ahead, `clock_skew`) has another time when delivered again,
    which the key (id, ts) would not skip: its id is kept in alert_skews (migration 0020, in both shapes, so that
    converting later knows those stored before) with the time it was stored at, and any delivery of that id at
    another time is skipped. The first delivery to write its id there stores it (two at once: the second waits for
    the first's commit, then skips it)."""
    raw = session.connection().connection.driver_connection
    assert raw is not None
    cols = ", ".join(COLUMNS)
    with raw.cursor() as cur:
        skewed = [r for r in rows if r.get("clock_skew")]
        if skewed:
            cur.execute("INSERT INTO alert_skews (id, ts) SELECT * FROM unnest(%s::text[], %s::timestamp[]) "
                        "ON CONFLICT (id) DO NOTHING RETURNING id", ([r["id"] for r in skewed],
                                                                    [r["ts"] for r in skewed]))
            again = {r["id"] for r in skewed} - {i for (i,) in cur.fetchall()}
            rows = [r for r in rows if r["id"] not in again]
        cur.execute("CREATE TEMPORARY TABLE IF NOT EXISTS incoming_alerts "
                    "(LIKE alerts INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
        with cur.copy(f"COPY incoming_alerts ({cols}) FROM STDIN") as copy:
            copy.write("".join(_copy_line(r) for r in rows))
        cur.execute(f"INSERT INTO alerts ({cols}) SELECT {cols} FROM incoming_alerts AS i WHERE NOT EXISTS "
                    "(SELECT 1 FROM alert_skews AS s WHERE s.id = i.id AND s.ts <> i.ts) "
                    "ON CONFLICT DO NOTHING RETURNING id, device_id, count")
        return [(i, d, n) for i, d, n in cur.fetchall()]
