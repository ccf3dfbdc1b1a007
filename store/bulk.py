"""Loading many alerts at once on PostgreSQL (issue 24, point 6: `fedsentry bench api --bulk`): COPY straight into
alerts with the roll-up triggers off and the table's secondary indexes dropped (made again from their own
definitions after), then the roll-ups (alert_tallies, alert_bands) filled from every stored alert by the insert
trigger's own statement, run once over the whole table (`refill`): the roll-ups' definition is written once, in the
migration that made the triggers. All in the caller's transaction: another session sees the alerts and their
roll-ups together or neither, and never the triggers off.

Alerts only as store.alerts.alert_row makes them, with no flagged records and no clock skew (those take
store_alerts' path); acknowledged ones carry their acknowledgement (ACK_COLUMNS)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from importlib import import_module
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from store import partitions
from store.alerts import _COPY_ESCAPES, COLUMNS, _copy_line, count_alerts

#: the migration whose trigger functions keep the roll-ups now (its insert statement fills them from alerts)
ROLLUP = import_module("store.migrations.versions.0021_alert_bands")
ROLLUP_TABLES = ("alert_tallies", "alert_bands")
ACK_COLUMNS = ("acknowledged_at", "acknowledged_by", "ack_note")


class BulkError(ValueError):
    """Alerts this path cannot load (nothing stored)."""


def load(session: Session, chunks: Iterable[Sequence[dict[str, Any]]]) -> int:
    """COPY the alert rows of every chunk (one stream: a chunk is freed once written), then fill the roll-ups and
    bump the devices' counters; how many alerts were stored. A stored id again fails the whole load (the key)."""
    conn = session.connection()
    if conn.dialect.name != "postgresql":
        raise BulkError(f"bulk loading is PostgreSQL only, not {conn.dialect.name}")
    if partitions.partitioned(conn):
        raise BulkError("bulk loading: alerts partitioned by day are not supported (one table only)")
    raw = conn.connection.driver_connection
    assert raw is not None
    records: Counter[str] = Counter()
    with raw.cursor() as cur:
        cur.execute("SET LOCAL maintenance_work_mem = '256MB'")
        cur.execute("SELECT i.indexname, i.indexdef FROM pg_indexes AS i WHERE i.schemaname = current_schema() "
                    "AND i.tablename = 'alerts' AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c "
                    "WHERE c.conindid = to_regclass(quote_ident(i.indexname))) ORDER BY 1")
        indexes = cur.fetchall()
        for name, _ in indexes:
            cur.execute(f'DROP INDEX "{name}"')
        for name in partitions.TRIGGERS:
            cur.execute(f"ALTER TABLE alerts DISABLE TRIGGER alert_tallies_{name}")
        with cur.copy(f"COPY alerts ({', '.join(COLUMNS + ACK_COLUMNS)}) FROM STDIN") as copy:
            for rows in chunks:
                copy.write("".join(map(_line, rows)))
                for r in rows:
                    records[r["device_id"]] += r["count"]
        for name in partitions.TRIGGERS:
            cur.execute(f"ALTER TABLE alerts ENABLE TRIGGER alert_tallies_{name}")
        for _, definition in indexes:
            cur.execute(definition)
        refill(cur)
    count_alerts(session, records)
    return int(session.scalar(text("SELECT count(*) FROM alerts")) or 0)


def refill(cur: Any) -> None:
    """Every roll-up from the alerts stored, set-based: emptied, then the insert trigger's statement over alerts."""
    cur.execute(f"TRUNCATE {', '.join(ROLLUP_TABLES)}")
    cur.execute("SET LOCAL work_mem = '256MB'")
    cur.execute(ROLLUP._pg_changes(ROLLUP._rows("alerts", 1)))


def _line(r: dict[str, Any]) -> str:
    if r.get("records") or r.get("clock_skew"):
        raise BulkError(f"alert {r['id']}: flagged records and clock skews are stored by store_alerts, not in bulk")
    extra = (r.get("acknowledged_at"), r.get("acknowledged_by"), r.get("ack_note"))
    return _copy_line(r)[:-1] + "".join(
        "\t" + ("\\N" if v is None else v.isoformat() if hasattr(v, "isoformat") else str(v).translate(_COPY_ESCAPES))
        for v in extra) + "\n"
