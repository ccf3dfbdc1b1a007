"""alert_tallies: the alerts added up per hour and per day (by device, job, incident and acknowledgement), kept by
triggers in the transaction that changes alerts (insert, acknowledgement, suppression, retention, deletion), and
filled from the alerts already stored, so that a month's counts and charts read a few thousand rows (issue 24,
point 6; store.rollup reads them)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 00:00:00
"""
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

KEY = "span, start, device_id, job_id, incident_id, acknowledged"
SPANS = "(SELECT 3600 AS span UNION ALL SELECT 86400) AS s"
UPSERT = (f"ON CONFLICT ({KEY}) DO UPDATE SET alerts = alert_tallies.alerts + excluded.alerts, "
          "records = alert_tallies.records + excluded.records")


def _pg_start(ts: str) -> str:
    return f"floor(extract(epoch FROM {ts}) / s.span)::bigint * s.span"


def _sqlite_start(ts: str) -> str:  # whole seconds as stored (strftime rounds a fraction to the millisecond)
    return f"CAST(strftime('%s', substr({ts}, 1, 19)) AS INTEGER) / s.span * s.span"


def _pg_changes(sources: str) -> str:
    """One statement adding up a statement's changed rows (`sources`: ts, device, job, incident, acknowledged,
    count, sign), in key order (two writers lock the same rows in the same order)."""
    return (f"INSERT INTO alert_tallies ({KEY}, alerts, records) "
            f"SELECT s.span, {_pg_start('c.ts')}, c.device_id, c.job_id, coalesce(c.incident_id, ''), c.acknowledged, "
            f"sum(c.sign), sum(c.sign * c.count) FROM ({sources}) AS c CROSS JOIN {SPANS} "
            "GROUP BY 1, 2, 3, 4, 5, 6 HAVING sum(c.sign) <> 0 OR sum(c.sign * c.count) <> 0 "
            f"ORDER BY 1, 2, 3, 4, 5, 6 {UPSERT}")


def _rows(table: str, sign: int) -> str:
    return f"SELECT ts, device_id, job_id, incident_id, acknowledged, count, {sign} AS sign FROM {table}"


PG_TRIGGERS = {  # name: (event, transition tables, changed rows)
    "insert": ("INSERT", "NEW TABLE AS new_rows", _rows("new_rows", 1)),
    "delete": ("DELETE", "OLD TABLE AS old_rows", _rows("old_rows", -1)),
    "update": ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows",
               f"{_rows('new_rows', 1)} UNION ALL {_rows('old_rows', -1)}"),
}


def _sqlite_change(row: str, sign: str) -> str:
    return (f"INSERT INTO alert_tallies ({KEY}, alerts, records) SELECT s.span, {_sqlite_start(row + '.ts')}, "
            f"{row}.device_id, {row}.job_id, coalesce({row}.incident_id, ''), {row}.acknowledged, {sign}1, "
            f"{sign}{row}.count FROM {SPANS} WHERE true {UPSERT};")


def _sqlite_backfill() -> str:
    return (f"INSERT INTO alert_tallies ({KEY}, alerts, records) SELECT s.span, {_sqlite_start('a.ts')}, "
            "a.device_id, a.job_id, coalesce(a.incident_id, ''), a.acknowledged, count(*), sum(a.count) "
            f"FROM alerts AS a CROSS JOIN {SPANS} GROUP BY 1, 2, 3, 4, 5, 6")


SQLITE_TRIGGERS = {
    "insert": ("AFTER INSERT ON alerts", _sqlite_change("NEW", "")),
    "delete": ("AFTER DELETE ON alerts", _sqlite_change("OLD", "-")),
    "update": ("AFTER UPDATE OF ts, device_id, job_id, incident_id, acknowledged, count ON alerts",
               _sqlite_change("OLD", "-") + " " + _sqlite_change("NEW", "")),
}


def upgrade() -> None:
    key: tuple[sa.types.TypeEngine[Any], ...] = (sa.Integer(), sa.BigInteger(), sa.String(64), sa.String(64),
                                                  sa.String(24), sa.Boolean())
    # the key holds the sums (PostgreSQL: INCLUDE; SQLite: a table without rowid is its key), so that reading a
    # month of tallies reads the key's index alone
    op.create_table('alert_tallies', *(sa.Column(name, kind, nullable=False, autoincrement=False)
                                       for name, kind in zip(KEY.split(", "), key, strict=True)),
                    *(sa.Column(name, sa.BigInteger(), nullable=False) for name in ("alerts", "records")),
                    sa.PrimaryKeyConstraint(*KEY.split(", "), postgresql_include=["alerts", "records"]),
                    sqlite_with_rowid=False)
    postgresql = op.get_bind().dialect.name == "postgresql"
    # what is stored already, added up once (before the triggers: nothing counted twice)
    op.execute(_pg_changes(_rows("alerts", 1)) if postgresql else _sqlite_backfill())
    if postgresql:  # once per statement, over the rows it changed (an ingested batch: one more statement)
        for name, (event, tables, rows) in PG_TRIGGERS.items():
            op.execute(f"CREATE FUNCTION alert_tallies_{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                       f"{_pg_changes(rows)}; RETURN NULL; END $$")
            op.execute(f"CREATE TRIGGER alert_tallies_{name} AFTER {event} ON alerts REFERENCING {tables} "
                       f"FOR EACH STATEMENT EXECUTE FUNCTION alert_tallies_{name}()")
    else:  # SQLite has row triggers only
        for name, (when, body) in SQLITE_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER alert_tallies_{name} {when} BEGIN {body} END")


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name in PG_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS alert_tallies_{name}" + (" ON alerts" if postgresql else ""))
        if postgresql:
            op.execute(f"DROP FUNCTION IF EXISTS alert_tallies_{name}()")
    op.drop_table('alert_tallies')
