"""PostgreSQL's alerts partitioned by time (issue 27, point 7): one partition per UTC day of `ts` (alerts_pYYYYMMDD),
and alerts_default for an alert whose day has none, so that none is ever refused: it is kept there, read through
the parent table like any other, and deleted by retention once older than it. The key is (id, ts): a redelivered
alert has its id and its time, so the insert's ON CONFLICT still skips it (store.alerts).

`make_ahead` (the coordinator's retention singleton, hourly) makes each day's partition AHEAD days before it starts;
making a day whose alerts wait in alerts_default moves them in. `drop_before` drops the partitions of whole days
before a cutoff, and their tallies with them (alert_tallies, migration 0013: dropping a table fires no trigger), so
that retention costs a few catalogue changes instead of deleting a day of rows. SQLite keeps one table."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.engine import Connection

#: days made ahead of today, checked hourly: two days in which retention's singleton may fail before alerts go to the
#: default partition (kept there, none lost). Not more: every partition costs planning time to a query without a
#: time bound, empty ones too
AHEAD = 2
DEFAULT = "alerts_default"
#: how long making or dropping a partition waits for the ingest's locks on the table before trying next time
LOCK_TIMEOUT = "5s"
_NAME = re.compile(r"alerts_p(\d{8})")
EPOCH = datetime(1970, 1, 1)


def partitioned(conn: Connection) -> bool:
    """Whether this database's alerts table is partitioned (PostgreSQL after migration 0019)."""
    return conn.dialect.name == "postgresql" and conn.execute(
        text("SELECT relkind FROM pg_class WHERE oid = to_regclass('alerts')")).scalar() == "p"


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
    """Drop the partitions of the days wholly before `cutoff`, with their hourly and daily tallies (every alert of
    such a day is in its partition); the days dropped. Alerts older than the cutoff in the day it falls in, or in
    alerts_default, are the caller's to delete."""
    gone = [d for d in days(conn) if _start(d + timedelta(days=1)) <= cutoff]
    if gone:
        conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    for d in gone:
        lo = int((_start(d) - EPOCH).total_seconds())
        conn.execute(text("DELETE FROM alert_tallies WHERE span IN (3600, 86400) AND start >= :lo AND start < :hi"),
                     {"lo": lo, "hi": lo + 86400})
        conn.execute(text(f"DROP TABLE {name(d)}"))
    return gone
