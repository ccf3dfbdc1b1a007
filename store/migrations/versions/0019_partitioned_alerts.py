"""PostgreSQL: alerts partitioned by range of ts, one partition per UTC day (store.partitions), with the key (id, ts)
so that a redelivered alert (same id, same time) is still stored once, and a default partition for an alert whose
day has none. Every alert is copied over, with the indexes and the tally triggers (migration 0013) as they were;
the alerts of each day of the last HISTORY_DAYS get its partition, older ones the default partition. alert_skews
holds the ids of alerts stored at their receipt (store.alerts), whose redeliveries carry another time. Downgraded,
one table again, keyed by id (refused, with nothing changed, if two alerts share an id). SQLite: unchanged.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 15:00:00
"""
from datetime import date, datetime, timedelta, timezone

import sqlalchemy as sa
from alembic import op

from store.partitions import AHEAD, DEFAULT, name

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None

#: days back from today whose stored alerts get their own partition (a device clock off by years would otherwise
#: make one partition per day it names)
HISTORY_DAYS = 366
#: the tally triggers of migration 0013 (their functions are kept; the triggers go with the table they are on)
TRIGGERS = {"insert": ("INSERT", "NEW TABLE AS new_rows"), "delete": ("DELETE", "OLD TABLE AS old_rows"),
            "update": ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows")}


def _indexes(conn: sa.Connection) -> dict[str, str]:
    """The alerts table's indexes but its key: name -> CREATE INDEX statement (on the table named alerts)."""
    rows = conn.execute(sa.text("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                                "AND tablename = 'alerts' AND indexname <> 'alerts_pkey'")).all()
    return {n: d.replace(" ON ONLY ", " ON ") for n, d in rows}  # (a partitioned table's say ONLY)


def _move_aside(conn: sa.Connection, to: str) -> dict[str, str]:
    """Rename alerts to `to`, freeing the names of its key and indexes; the indexes to make again."""
    indexes = _indexes(conn)
    op.execute(f"ALTER TABLE alerts RENAME TO {to}")
    op.execute(f"ALTER TABLE {to} RENAME CONSTRAINT alerts_pkey TO {to}_pkey")
    for index in indexes:
        op.execute(f"DROP INDEX {index}")
    return indexes


def _finish(old: str, key: str, indexes: dict[str, str]) -> None:
    """With the rows copied: the key, the indexes and the tally triggers on the new alerts, the old table gone."""
    op.execute(f"ALTER TABLE alerts ADD CONSTRAINT alerts_pkey PRIMARY KEY ({key})")
    for statement in indexes.values():
        op.execute(statement)
    op.execute(f"DROP TABLE {old}")
    for trigger, (event, tables) in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER alert_tallies_{trigger} AFTER {event} ON alerts REFERENCING {tables} "
                   f"FOR EACH STATEMENT EXECUTE FUNCTION alert_tallies_{trigger}()")
    op.execute("ANALYZE alerts")


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    indexes = _move_aside(conn, "alerts_unpartitioned")
    op.execute("CREATE TABLE alerts (LIKE alerts_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
               "PARTITION BY RANGE (ts)")
    op.execute(f"CREATE TABLE {DEFAULT} PARTITION OF alerts DEFAULT")
    today = datetime.now(timezone.utc).date()
    stored = conn.execute(sa.text("SELECT DISTINCT ts::date FROM alerts_unpartitioned WHERE ts >= :since"),
                          {"since": today - timedelta(days=HISTORY_DAYS)}).scalars()
    ahead = (today + timedelta(days=k) for k in range(AHEAD + 1))
    for day in sorted({*stored, *ahead}):
        _partition(day)
    op.execute("INSERT INTO alerts SELECT * FROM alerts_unpartitioned")
    _finish("alerts_unpartitioned", "id, ts", indexes)
    # the alerts stored at their receipt (store.alerts: a device clock ahead), whose redeliveries come at another
    # time: those stored so far are not known (one table keyed by id skipped them)
    op.execute("CREATE TABLE alert_skews (id varchar(64) PRIMARY KEY, ts timestamp NOT NULL)")
    op.execute("CREATE INDEX ix_alert_skews_ts ON alert_skews (ts)")


def _partition(day: date) -> None:
    after = day + timedelta(days=1)
    op.execute(f"CREATE TABLE {name(day)} PARTITION OF alerts FOR VALUES FROM ('{day}') TO ('{after}')")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    shared = conn.execute(sa.text("SELECT count(*) FROM (SELECT id FROM alerts GROUP BY id HAVING count(*) > 1) d")
                          ).scalar()
    if shared:
        raise RuntimeError(f"{shared} alert ids are stored more than once (at different times): one table keyed by "
                           "id cannot hold them; delete all but one of each before downgrading below 0019")
    op.execute("DROP TABLE alert_skews")
    indexes = _move_aside(conn, "alerts_partitioned")
    op.execute("CREATE TABLE alerts (LIKE alerts_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    op.execute("INSERT INTO alerts SELECT * FROM alerts_partitioned")
    _finish("alerts_partitioned", "id", indexes)
