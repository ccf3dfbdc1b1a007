"""PostgreSQL's alerts partitioned by time (issue 27, point 7), opt-in: `fedsentry db partition-alerts` (`convert`)
makes `alerts` one partition per UTC day of `ts` (alerts_pYYYYMMDD) and alerts_default for an alert whose day has
none, so that none is ever refused: it is kept there, read through the parent table like any other, and deleted by
retention once older than it; `--undo` (`unconvert`) makes it one table again. The key is (id, ts): a redelivered
alert has its id and its time, so the insert's ON CONFLICT still skips it (store.alerts). The default schema (the
migrations) is one table keyed by id: every query without a bound on `ts` plans and opens each partition, so the
analyst's requests are slower partitioned (benchmarks/results/alert-partitions.md); it pays for retention by
dropping days at very large volumes. Whether alerts is partitioned is read from the catalogue (`partitioned`).

`make_ahead` (the coordinator's retention singleton, hourly) makes each day's partition AHEAD days before it starts;
making a day whose alerts wait in alerts_default moves them in. `drop_before` drops the partitions of whole days
before a cutoff, and their tallies with them (alert_tallies, migration 0013: dropping a table fires no trigger), so
that retention costs a few catalogue changes instead of deleting a day of rows. SQLite keeps one table."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.engine import Connection

from store.rollup import DAY, EPOCH, HOUR

#: days made ahead of today, checked hourly: two days in which retention's singleton may fail before alerts go to the
#: default partition (kept there, none lost). Not more: every partition costs planning time to a query without a
#: time bound, empty ones too
AHEAD = 2
DEFAULT = "alerts_default"
#: how long making or dropping a partition waits for the ingest's locks on the table before trying next time
LOCK_TIMEOUT = "5s"
_NAME = re.compile(r"alerts_p(\d{8})")


#: days back from today whose stored alerts get their own partition when converting (a device clock off by years would
#: otherwise make one partition per day it names); older ones go to the default partition
HISTORY_DAYS = 366
#: the tally triggers of migration 0013 (their functions are kept; the triggers go with the table they are on)
TRIGGERS = {"insert": ("INSERT", "NEW TABLE AS new_rows"), "delete": ("DELETE", "OLD TABLE AS old_rows"),
            "update": ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows")}


POSTGRESQL_ONLY = "alerts are partitioned on PostgreSQL only"


class ShapeError(ValueError):
    """A conversion that cannot be done on this database (nothing changed)."""


def partitioned(conn: Connection) -> bool:
    """Whether this database's alerts table is partitioned, from PostgreSQL's catalogue (never on SQLite)."""
    return conn.dialect.name == "postgresql" and bool(conn.execute(
        text("SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass('alerts'))")).scalar())


def name(day: date) -> str:
    return f"alerts_p{day:%Y%m%d}"


def days(conn: Connection) -> list[date]:
    """The days that have a partition, oldest first."""
    names = conn.execute(text("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                              "WHERE i.inhparent = 'alerts'::regclass")).scalars()
    return sorted(datetime.strptime(m.group(1), "%Y%m%d").date() for n in names if (m := _NAME.fullmatch(n)))


def _start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day)


def make(conn: Connection, day: date) -> int:
    """Make `day`'s partition, moving the alerts of that day kept in alerts_default into it; how many moved. The
    moved rows stay counted in alert_tallies: they are moved between partitions, never deleted from alerts (the
    tallies' statement triggers are the parent's)."""
    lo, hi, part = _start(day), _start(day + timedelta(days=1)), name(day)
    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    # made apart and attached: attaching locks the parent without stopping the inserts into other partitions, and
    # alerts_default against new rows of the day until it is attached
    conn.execute(text(f"CREATE TABLE {part} (LIKE alerts INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    conn.execute(text(f"LOCK TABLE {DEFAULT} IN ACCESS EXCLUSIVE MODE"))
    moved = conn.execute(text(f"WITH m AS (DELETE FROM {DEFAULT} WHERE ts >= :lo AND ts < :hi RETURNING *) "
                              f"INSERT INTO {part} SELECT * FROM m"), {"lo": lo, "hi": hi}).rowcount
    bound = f"FROM ('{lo.isoformat(' ')}') TO ('{hi.isoformat(' ')}')"
    conn.execute(text(f"ALTER TABLE {part} ADD CONSTRAINT {part}_bound CHECK (ts >= '{lo.isoformat(' ')}' AND "
                      f"ts < '{hi.isoformat(' ')}')"))  # spares attaching a scan of the moved rows
    conn.execute(text(f"ALTER TABLE alerts ATTACH PARTITION {part} FOR VALUES {bound}"))
    conn.execute(text(f"ALTER TABLE {part} DROP CONSTRAINT {part}_bound"))
    return int(moved or 0)


def make_days(conn: Connection, first: date, last: date) -> list[date]:
    """Make the partitions of the days from `first` to `last` that are missing; the days made."""
    have = set(days(conn))
    made = [d for d in (first + timedelta(days=k) for k in range((last - first).days + 1)) if d not in have]
    for d in made:
        make(conn, d)
    return made


def make_ahead(conn: Connection, now: datetime, ahead: int = AHEAD) -> list[date]:
    """Make the partitions of today and the `ahead` days after it that are missing; the days made."""
    return make_days(conn, now.date(), now.date() + timedelta(days=ahead))


def drop_before(conn: Connection, cutoff: datetime) -> list[date]:
    """Drop the partitions of the days wholly before `cutoff`, with their hourly and daily tallies and bands
    (every alert of such a day is in its partition); the days dropped. Alerts older than the cutoff in the day it
    falls in, or in alerts_default, are the caller's to delete."""
    gone = [d for d in days(conn) if _start(d + timedelta(days=1)) <= cutoff]
    if gone:
        conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    for d in gone:
        lo = int((_start(d) - EPOCH).total_seconds())
        for rollup in ("alert_tallies", "alert_bands"):
            conn.execute(text(f"DELETE FROM {rollup} WHERE span IN (:hour, :day) AND start >= :lo AND start < :hi"),
                         {"hour": HOUR, "day": DAY, "lo": lo, "hi": lo + DAY})
        conn.execute(text(f"DROP TABLE {name(d)}"))
    return gone


def _indexes(conn: Connection) -> dict[str, str]:
    """The alerts table's indexes but its key: name -> CREATE INDEX statement (on the table named alerts)."""
    rows = conn.execute(text("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                             "AND tablename = 'alerts' AND indexname <> 'alerts_pkey'")).all()
    return {n: d.replace(" ON ONLY ", " ON ") for n, d in rows}  # (a partitioned table's say ONLY)


def _move_aside(conn: Connection, to: str) -> dict[str, str]:
    """Rename alerts to `to`, freeing the names of its key and indexes; the indexes to make again."""
    indexes = _indexes(conn)
    conn.execute(text(f"ALTER TABLE alerts RENAME TO {to}"))
    conn.execute(text(f"ALTER TABLE {to} RENAME CONSTRAINT alerts_pkey TO {to}_pkey"))
    for index in indexes:
        conn.execute(text(f"DROP INDEX {index}"))
    return indexes


def _finish(conn: Connection, old: str, key: str, indexes: dict[str, str]) -> None:
    """With the rows copied: the key, the indexes and the tally triggers on the new alerts, the old table gone."""
    conn.execute(text(f"ALTER TABLE alerts ADD CONSTRAINT alerts_pkey PRIMARY KEY ({key})"))
    for statement in indexes.values():
        conn.execute(text(statement))
    conn.execute(text(f"DROP TABLE {old}"))
    for trigger, (event, tables) in TRIGGERS.items():
        conn.execute(text(f"CREATE TRIGGER alert_tallies_{trigger} AFTER {event} ON alerts REFERENCING {tables} "
                          f"FOR EACH STATEMENT EXECUTE FUNCTION alert_tallies_{trigger}()"))
    conn.execute(text("ANALYZE alerts"))


def check(conn: Connection, want: bool) -> None:
    """Refuse (ShapeError, nothing changed) unless this is PostgreSQL with alerts in the other shape than `want`."""
    if conn.dialect.name != "postgresql":
        raise ShapeError(f"{POSTGRESQL_ONLY} (this database is {conn.dialect.name})")
    if partitioned(conn) == want:
        raise ShapeError("alerts are already partitioned by day" if want else "alerts are not partitioned")


def convert(conn: Connection, now: datetime) -> int:
    """Make alerts partitioned by day, every alert copied with the indexes and tally triggers as they were: the days
    of the last HISTORY_DAYS that have alerts, today and AHEAD days after it get their partitions, older alerts the
    default one. In the caller's transaction (it holds alerts locked until it commits); the alerts copied."""
    check(conn, True)
    indexes = _move_aside(conn, "alerts_unpartitioned")
    conn.execute(text("CREATE TABLE alerts (LIKE alerts_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
                      "PARTITION BY RANGE (ts)"))
    conn.execute(text(f"CREATE TABLE {DEFAULT} PARTITION OF alerts DEFAULT"))
    today = now.date()
    stored = conn.execute(text("SELECT DISTINCT ts::date FROM alerts_unpartitioned WHERE ts >= :since"),
                          {"since": today - timedelta(days=HISTORY_DAYS)}).scalars()
    for day in sorted({*stored, *(today + timedelta(days=k) for k in range(AHEAD + 1))}):
        conn.execute(text(f"CREATE TABLE {name(day)} PARTITION OF alerts FOR VALUES FROM ('{day}') "
                          f"TO ('{day + timedelta(days=1)}')"))
    copied = conn.execute(text("INSERT INTO alerts SELECT * FROM alerts_unpartitioned")).rowcount
    _finish(conn, "alerts_unpartitioned", "id, ts", indexes)
    return int(copied or 0)


def unconvert(conn: Connection) -> int:
    """Make alerts one table keyed by id again (refused if two alerts share an id); the alerts copied."""
    check(conn, False)
    shared = conn.execute(text("SELECT count(*) FROM (SELECT id FROM alerts GROUP BY id HAVING count(*) > 1) d")
                          ).scalar()
    if shared:
        raise ShapeError(f"{shared} alert ids are stored more than once (at different times): one table keyed by id "
                      "cannot hold them; delete all but one of each first")
    indexes = _move_aside(conn, "alerts_partitioned")
    conn.execute(text("CREATE TABLE alerts (LIKE alerts_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    copied = conn.execute(text("INSERT INTO alerts SELECT * FROM alerts_partitioned")).rowcount
    _finish(conn, "alerts_partitioned", "id", indexes)
    return int(copied or 0)
