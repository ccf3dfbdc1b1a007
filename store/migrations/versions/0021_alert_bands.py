"""alert_bands and the tallies' top score: counts and series under a minimum score from roll-ups (issue 24, point 6)

alert_bands adds up the alerts per hour and per day by job, acknowledgement and score band (store.rollup.band_sql,
1/32 of an octave); alert_tallies gains `top`, the highest score of its alerts. The same statement triggers that
keep the tallies keep both, in the transaction that changes alerts: an insert raises a top; a deletion or an update
that takes away a tally's top alert reads that hour's alerts again for the next highest, and the day's hours. Both are filled from the
alerts already stored (a day's top from its hours'). store.rollup reads them: the whole hours and days of a window add up the bands above the
score's own and that band's alerts at or above the score; tallies whose top reaches the score name the devices and
incidents.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26 21:00:00
"""
from importlib import import_module
from typing import Any

import sqlalchemy as sa
from alembic import op

from store.rollup import band_sql

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None

BEFORE = import_module("store.migrations.versions.0013_alert_tallies")  # the tallies, their key and their triggers
KEY, SPANS, _pg_start = BEFORE.KEY, BEFORE.SPANS, BEFORE._pg_start
BAND_KEY = "span, start, job_id, acknowledged, band"
#: a tally's top: raised by an alert added (NULL: none added)
RAISE = "CASE WHEN excluded.top IS NULL OR alert_tallies.top >= excluded.top THEN alert_tallies.top ELSE excluded.top END"
UPSERT = (f"ON CONFLICT ({KEY}) DO UPDATE SET alerts = alert_tallies.alerts + excluded.alerts, "
          f"records = alert_tallies.records + excluded.records, top = {RAISE}")
BAND_UPSERT = (f"ON CONFLICT ({BAND_KEY}) DO UPDATE SET alerts = alert_bands.alerts + excluded.alerts, "
               "records = alert_bands.records + excluded.records")


def _sqlite_start(ts: str, span: str = "s.span") -> str:
    return f"CAST(strftime('%s', substr({ts}, 1, 19)) AS INTEGER) / {span} * {span}"


def _rows(table: str, sign: int) -> str:
    return f"SELECT ts, device_id, job_id, incident_id, acknowledged, count, score, {sign} AS sign FROM {table}"


def _pg_changes(sources: str) -> str:
    """The tallies' statement (0013's, with top) and the bands', over a statement's changed rows (`sources`), in
    key order (two writers lock the same rows in the same order)."""
    tallies = (f"INSERT INTO alert_tallies ({KEY}, alerts, records, top) "
               f"SELECT s.span, {_pg_start('c.ts')}, c.device_id, c.job_id, coalesce(c.incident_id, ''), "
               "c.acknowledged, sum(c.sign), sum(c.sign * c.count), max(c.score) FILTER (WHERE c.sign > 0) "
               f"FROM ({sources}) AS c CROSS JOIN {SPANS} GROUP BY 1, 2, 3, 4, 5, 6 "
               "HAVING sum(c.sign) <> 0 OR sum(c.sign * c.count) <> 0 OR bool_or(c.sign > 0) "
               f"ORDER BY 1, 2, 3, 4, 5, 6 {UPSERT}")
    bands = (f"INSERT INTO alert_bands ({BAND_KEY}, alerts, records) "
             f"SELECT s.span, {_pg_start('c.ts')}, c.job_id, c.acknowledged, {band_sql('c.score')}, sum(c.sign), "
             f"sum(c.sign * c.count) FROM ({sources}) AS c CROSS JOIN {SPANS} GROUP BY 1, 2, 3, 4, 5 "
             f"HAVING sum(c.sign) <> 0 OR sum(c.sign * c.count) <> 0 ORDER BY 1, 2, 3, 4, 5 {BAND_UPSERT}")
    return f"{tallies}; {bands}"


def _day_top(t: str) -> str:
    """A day tally's top: its 24 hour tallies' highest (read by their keys)."""
    hours = ", ".join(f"{t}.start + {h * 3600}" for h in range(24))
    return (f"(SELECT max(h.top) FROM alert_tallies AS h WHERE h.span = 3600 AND h.start IN ({hours}) "
            f"AND h.device_id = {t}.device_id AND h.job_id = {t}.job_id AND h.incident_id = {t}.incident_id "
            f"AND h.acknowledged = {t}.acknowledged AND h.alerts > 0)")


def _pg_retop(gone: str) -> str:
    """The tallies that lost their top alert (`gone`: the removed rows) take their alerts' highest score again: the
    hours from alerts, then the days from their hours."""
    hour_top = ("(SELECT max(a.score) FROM alerts AS a WHERE a.device_id = t.device_id AND a.job_id = t.job_id "
                "AND coalesce(a.incident_id, '') = t.incident_id AND a.acknowledged = t.acknowledged "
                "AND a.ts >= timestamp '1970-01-01' + t.start * interval '1 second' "
                "AND a.ts < timestamp '1970-01-01' + (t.start + 3600) * interval '1 second')")
    return "; ".join(
        f"UPDATE alert_tallies AS t SET top = {hour_top if span == 3600 else _day_top('t')} "
        f"FROM (SELECT floor(extract(epoch FROM c.ts) / {span})::bigint * {span} AS start, c.device_id, c.job_id, "
        "coalesce(c.incident_id, '') AS incident_id, c.acknowledged, max(c.score) AS gone "
        f"FROM {gone} AS c GROUP BY 1, 2, 3, 4, 5) AS o "
        f"WHERE t.span = {span} AND t.start = o.start AND t.device_id = o.device_id AND t.job_id = o.job_id "
        "AND t.incident_id = o.incident_id AND t.acknowledged = o.acknowledged AND o.gone >= t.top"
        for span in (3600, 86400))


PG_TRIGGERS = {  # the functions of 0013's statement triggers: (changed rows, removed rows)
    "insert": (_rows("new_rows", 1), None),
    "delete": (_rows("old_rows", -1), "old_rows"),
    "update": (f"{_rows('new_rows', 1)} UNION ALL {_rows('old_rows', -1)}", "old_rows"),
}


def _sqlite_change(row: str, sign: str) -> str:
    top = f"{row}.score" if not sign else "NULL"
    tallies = (f"INSERT INTO alert_tallies ({KEY}, alerts, records, top) SELECT s.span, "
               f"{_sqlite_start(row + '.ts')}, {row}.device_id, {row}.job_id, coalesce({row}.incident_id, ''), "
               f"{row}.acknowledged, {sign}1, {sign}{row}.count, {top} FROM {SPANS} WHERE true {UPSERT};")
    bands = (f"INSERT INTO alert_bands ({BAND_KEY}, alerts, records) SELECT s.span, {_sqlite_start(row + '.ts')}, "
             f"{row}.job_id, {row}.acknowledged, {band_sql(row + '.score')}, {sign}1, {sign}{row}.count "
             f"FROM {SPANS} WHERE true {BAND_UPSERT};")
    if not sign:
        return tallies + " " + bands
    hour_top = ("(SELECT max(a.score) FROM alerts AS a WHERE a.device_id = alert_tallies.device_id "
                "AND a.job_id = alert_tallies.job_id AND coalesce(a.incident_id, '') = alert_tallies.incident_id "
                f"AND a.acknowledged = alert_tallies.acknowledged AND {_sqlite_start('a.ts', '3600')} = "
                "alert_tallies.start)")
    retop = "".join(  # the hour from alerts, then the day from its hours; one statement a span (the key is the table's)
        f"UPDATE alert_tallies SET top = {hour_top if span == 3600 else _day_top('alert_tallies')} "
        f"WHERE span = {span} AND start = {_sqlite_start(row + '.ts', str(span))} AND device_id = {row}.device_id "
        f"AND job_id = {row}.job_id AND incident_id = coalesce({row}.incident_id, '') "
        f"AND acknowledged = {row}.acknowledged AND top <= {row}.score; " for span in (3600, 86400))
    return tallies + " " + retop + bands


SQLITE_TRIGGERS = {
    "insert": ("AFTER INSERT ON alerts", _sqlite_change("NEW", "")),
    "delete": ("AFTER DELETE ON alerts", _sqlite_change("OLD", "-")),
    "update": ("AFTER UPDATE OF ts, device_id, job_id, incident_id, acknowledged, count, score ON alerts",
               _sqlite_change("OLD", "-") + " " + _sqlite_change("NEW", "")),
}


def backfill(postgresql: bool) -> list[str]:
    """The bands and tops of the alerts stored (before the triggers keep them: nothing counted twice)."""
    start = _pg_start("a.ts") if postgresql else _sqlite_start("a.ts")
    return [f"INSERT INTO alert_bands ({BAND_KEY}, alerts, records) SELECT s.span, {start}, a.job_id, a.acknowledged, "
            f"{band_sql('a.score')}, count(*), sum(a.count) FROM alerts AS a CROSS JOIN {SPANS} GROUP BY 1, 2, 3, 4, 5",
            f"UPDATE alert_tallies SET top = o.top FROM (SELECT s.span, {start} AS start, a.device_id, a.job_id, "
            "coalesce(a.incident_id, '') AS incident_id, a.acknowledged, max(a.score) AS top "
            f"FROM alerts AS a CROSS JOIN {SPANS} GROUP BY 1, 2, 3, 4, 5, 6) AS o WHERE alert_tallies.span = o.span "
            "AND alert_tallies.start = o.start AND alert_tallies.device_id = o.device_id "
            "AND alert_tallies.job_id = o.job_id AND alert_tallies.incident_id = o.incident_id "
            "AND alert_tallies.acknowledged = o.acknowledged"]


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    key: tuple[sa.types.TypeEngine[Any], ...] = (sa.Integer(), sa.BigInteger(), sa.String(64), sa.Boolean(),
                                                  sa.Integer())
    op.create_table('alert_bands', *(sa.Column(name, kind, nullable=False, autoincrement=False)
                                     for name, kind in zip(BAND_KEY.split(", "), key, strict=True)),
                    *(sa.Column(name, sa.BigInteger(), nullable=False) for name in ("alerts", "records")),
                    sa.PrimaryKeyConstraint(*BAND_KEY.split(", "), postgresql_include=["alerts", "records"]),
                    sqlite_with_rowid=False)
    if postgresql:  # the key holds top too, so that the tallies reaching a score are read from the key alone
        op.add_column('alert_tallies', sa.Column('top', sa.Float(), nullable=True))
        op.execute("ALTER TABLE alert_tallies DROP CONSTRAINT alert_tallies_pkey, "
                   f"ADD CONSTRAINT alert_tallies_pkey PRIMARY KEY ({KEY}) INCLUDE (alerts, records, top)")
    else:  # (a table without rowid is its key)
        op.add_column('alert_tallies', sa.Column('top', sa.Float(), nullable=True))
    for statement in backfill(postgresql):
        op.execute(statement)
    if postgresql:  # the triggers of 0013 call these functions
        for name, (rows, gone) in PG_TRIGGERS.items():
            body = _pg_changes(rows) + (f"; {_pg_retop(gone)}" if gone else "")
            op.execute(f"CREATE OR REPLACE FUNCTION alert_tallies_{name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                       f"BEGIN {body}; RETURN NULL; END $$")
    else:
        for name, (when, body) in SQLITE_TRIGGERS.items():
            op.execute(f"DROP TRIGGER alert_tallies_{name}")
            op.execute(f"CREATE TRIGGER alert_tallies_{name} {when} BEGIN {body} END")


def downgrade() -> None:
    before = BEFORE
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        for name, (_, _, rows) in before.PG_TRIGGERS.items():
            op.execute(f"CREATE OR REPLACE FUNCTION alert_tallies_{name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                       f"BEGIN {before._pg_changes(rows)}; RETURN NULL; END $$")
        op.execute("ALTER TABLE alert_tallies DROP CONSTRAINT alert_tallies_pkey, "
                   f"ADD CONSTRAINT alert_tallies_pkey PRIMARY KEY ({KEY}) INCLUDE (alerts, records)")
    else:
        for name, (when, body) in before.SQLITE_TRIGGERS.items():
            op.execute(f"DROP TRIGGER alert_tallies_{name}")
            op.execute(f"CREATE TRIGGER alert_tallies_{name} {when} BEGIN {body} END")
    op.execute("ALTER TABLE alert_tallies DROP COLUMN top")  # (SQLite 3.35: a column outside the key)
    op.drop_table('alert_bands')
