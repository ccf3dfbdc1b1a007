"""Every flagged record past a device's alert budget, kept whole (issue 24): an incident update carries the
records it counts (`records`, at most RECORDS_PER_ALERT), each with its time, score, flow fields and
explanation. They are stored with the update, in the same transaction (so the update is acknowledged only once
they are), and found by incident, device, time, Zeek uid or address, newest first, a page at a time.

The traffic is the attacker's: a record's flow fields are kept as an alert's are (wire.flows.clean_flow), its
explanation's non-finite values as null; a record that is not an object, or whose score is not a finite number,
is left out and counted (`dropped["record"]`), never a reason to refuse the update it came in.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from store.db import FlaggedRecord
from wire.flows import clean_flow, finite, ip_text

#: records one incident update may carry (the agent sends more updates for more)
RECORDS_PER_ALERT = 64
#: the largest explanation of one record (JSON characters)
EXPLANATION_CHARS = 4096


def _text(flow: dict[str, Any] | None, key: str) -> str | None:
    v = (flow or {}).get(key)
    return str(v)[:64] if v is not None else None


def canonical_address(text: str | None) -> str | None:
    """An address as it is stored and searched: an IP address in its canonical text (wire.flows.ip_text), so that
    2001:DB8:0::1 and 2001:db8::1 find the same flows; any other text as it was given."""
    return None if text is None else ip_text(text) or text


def record_rows(update: dict[str, Any], raw: Any, earliest: float, latest: float,
                dropped: Counter[str] | None = None) -> list[dict[str, Any]]:
    """The table rows of the records an incident update (its alert row) carried."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        if dropped is not None:
            dropped["record"] += 1
        return []
    out = []
    lost = max(0, len(raw) - RECORDS_PER_ALERT)
    for i, r in enumerate(raw[:RECORDS_PER_ALERT]):
        try:
            score, ts = float(r["score"]), float(r.get("ts", 0.0))
            if not math.isfinite(score):
                raise ValueError("score")
        except (KeyError, TypeError, ValueError, OverflowError):
            lost += 1
            continue
        if earliest <= ts <= latest:
            when = datetime.fromtimestamp(ts, timezone.utc).replace(tzinfo=None)
        else:  # a device clock off: the update's time (store.alerts.CLOCK_SKEW), counted
            when = update["ts"]
            if dropped is not None:
                dropped["clock_skew"] += 1
        flow, n = clean_flow(r.get("flow"))
        if n and dropped is not None:
            dropped["flow_field"] += n
        explanation = r.get("explanation")
        try:
            explanation = finite(explanation) if isinstance(explanation, list) else []
            if len(json.dumps(explanation, allow_nan=False)) > EXPLANATION_CHARS:
                explanation = explanation[:3]
                if len(json.dumps(explanation, allow_nan=False)) > EXPLANATION_CHARS:
                    explanation = []
        except (TypeError, ValueError, RecursionError):
            explanation = []
        out.append({"id": hashlib.sha256(f"{update['id']}:{i}".encode()).hexdigest()[:40],
                    "alert_id": update["id"], "device_id": update["device_id"],
                    "incident_id": update.get("incident_id"), "ts": when, "score": score,
                    "threshold": update["threshold"], "explanation": explanation, "flow": flow,
                    "uid": _text(flow, "uid"), "orig_h": canonical_address(_text(flow, "id.orig_h")),
                    "resp_h": canonical_address(_text(flow, "id.resp_h")),
                    "suppression_id": None})
    if lost and dropped is not None:
        dropped["record"] += lost
    return out


def insert_for(session: Session) -> Any:
    """The dialect's INSERT (with ON CONFLICT) for this session's database."""
    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


def store_records(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert the records (a redelivered update's are already there: skipped by their ids)."""
    if rows:
        session.execute(insert_for(session)(FlaggedRecord).on_conflict_do_nothing(index_elements=["id"]), list(rows))


def find_records(session: Session, *, incident: str | None = None, device: str | None = None,
                 uid: str | None = None, ip: str | None = None, since: datetime | None = None,
                 until: datetime | None = None, after: tuple[datetime, str] | None = None,
                 limit: int = 100, suppressed: bool = False,
                 suppression: str | None = None) -> tuple[list[FlaggedRecord], tuple[datetime, str] | None]:
    """Newest first, `limit` a page, from after the cursor (ts, id) of the previous page; (rows, next cursor).
    Records a suppression rule holds are left out unless `suppressed` (or asked for by their rule)."""
    q = select(FlaggedRecord)
    if suppression is not None:
        q = q.where(FlaggedRecord.suppression_id == suppression)
    elif not suppressed:
        q = q.where(FlaggedRecord.suppression_id.is_(None))
    if incident is not None:
        q = q.where(FlaggedRecord.incident_id == incident)
    if device is not None:
        q = q.where(FlaggedRecord.device_id == device)
    if uid is not None:
        q = q.where(FlaggedRecord.uid == uid)
    if ip is not None:
        ip = canonical_address(ip)
        q = q.where(or_(FlaggedRecord.orig_h == ip, FlaggedRecord.resp_h == ip))
    if since is not None:
        q = q.where(FlaggedRecord.ts >= since)
    if until is not None:
        q = q.where(FlaggedRecord.ts < until)
    if after is not None:
        q = q.where(or_(FlaggedRecord.ts < after[0], and_(FlaggedRecord.ts == after[0], FlaggedRecord.id < after[1])))
    rows = list(session.scalars(q.order_by(FlaggedRecord.ts.desc(), FlaggedRecord.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, ((rows[-1].ts, rows[-1].id) if more else None)
