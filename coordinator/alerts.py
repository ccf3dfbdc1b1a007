"""Storing alerts in bulk: one multi-row INSERT per batch, a redelivered alert (same id) skipped by the
database itself (ON CONFLICT DO NOTHING), and each device's counter bumped once per batch.

This is the coordinator's hot path under an alert flood: a few statements per batch, whatever its size,
on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from coordinator.db import Alert, Device, utcnow


def _insert(session: Session):
    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


COLUMNS = ("id", "device_id", "job_id", "model_version", "ts", "received", "score", "threshold", "count",
           "explanation", "acknowledged")


def store_alerts(session: Session, rows: Sequence[dict[str, Any]]) -> Counter[str]:
    """Insert the alerts that are not stored yet; return how many were new per device."""
    insert = _insert(session)
    fresh: Counter[str] = Counter()
    if not rows:
        return fresh
    if session.get_bind().dialect.name == "postgresql":
        fresh.update(_copy_postgresql(session, rows))
    else:  # one cached statement, executed as multi-row VALUES batches ("insertmanyvalues")
        stmt = insert(Alert).on_conflict_do_nothing(index_elements=["id"]).returning(Alert.device_id)
        fresh.update(session.scalars(stmt, list(rows)))
    if fresh:  # one upsert per device, as one cached statement
        now = utcnow()
        stmt = insert(Device)
        stmt = stmt.on_conflict_do_update(index_elements=["id"], set_={
            "alerts": Device.alerts + stmt.excluded.alerts, "last_seen": stmt.excluded.last_seen})
        session.execute(stmt, [{"id": d, "online": True, "alerts": n, "rounds": 0, "first_seen": now,
                                "last_seen": now} for d, n in fresh.items()])
    return fresh


def _copy_postgresql(session: Session, rows: Sequence[dict[str, Any]]) -> list[str]:
    """COPY the batch into a temporary table, then move the new ones over: an order of magnitude faster
    than parameterised INSERTs, and a redelivered alert id is still skipped by the primary key."""
    from psycopg.types.json import Json

    raw = session.connection().connection.driver_connection
    assert raw is not None
    cols = ", ".join(COLUMNS)
    with raw.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE IF NOT EXISTS incoming_alerts "
                    "(LIKE alerts INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
        with cur.copy(f"COPY incoming_alerts ({cols}) FROM STDIN") as copy:
            for r in rows:
                copy.write_row([Json(r[c]) if c == "explanation" else r[c] for c in COLUMNS])
        cur.execute(f"INSERT INTO alerts ({cols}) SELECT {cols} FROM incoming_alerts "
                    "ON CONFLICT (id) DO NOTHING RETURNING device_id")
        return [d for (d,) in cur.fetchall()]
