"""Retention and the alerts' partitions, done hourly by one coordinator of those on a database (the "retention"
singleton, store.singleton). Where alerts are partitioned by day (PostgreSQL, opt-in: store.partitions), the day
partitions made ahead, and with a retention period whole days older than it dropped as partitions (their tallies
with them). With a retention period, the rest deleted as rows: every older alert of one table (the default schema,
SQLite's too), or of the day the cutoff falls in and of the default partition; flagged records, per-round metrics,
and PostgreSQL's alert_skews."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime

from sqlalchemy import delete, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from store import partitions
from store.db import Alert, FlaggedRecord, Round

log = logging.getLogger("fedsentry.retention")


@dataclass
class Pruned:
    made: list[date] = field(default_factory=list)  # partitions made
    dropped: list[date] = field(default_factory=list)  # partitions dropped
    alerts: int = 0  # alerts deleted as rows
    records: int = 0
    rounds: int = 0


def maintain(sessions: sessionmaker[Session], now: datetime, cutoff: datetime | None) -> Pruned:
    """Where alerts are partitioned, make the partitions ahead; with a cutoff, drop what is older. A partition change
    that waited past its lock timeout (store.partitions.LOCK_TIMEOUT, the ingest holding the table) is left for the
    next time, logged."""
    out = Pruned()
    try:
        with sessions.begin() as s:
            if partitions.partitioned(s.connection()):
                out.made = partitions.make_ahead(s.connection(), now)
                if cutoff is not None:
                    out.dropped = partitions.drop_before(s.connection(), cutoff)
    except OperationalError as e:
        log.warning("alert partitions left unchanged until the next time: %s", str(e).strip().splitlines()[0][:200])
    if cutoff is not None:
        with sessions.begin() as s:
            out.alerts = _deleted(s.execute(delete(Alert).where(Alert.ts < cutoff)))
            out.records = _deleted(s.execute(delete(FlaggedRecord).where(FlaggedRecord.ts < cutoff)))
            out.rounds = _deleted(s.execute(delete(Round).where(Round.completed < cutoff)))
            if s.get_bind().dialect.name == "postgresql":  # (migration 0020)
                s.execute(text("DELETE FROM alert_skews WHERE ts < :cutoff"), {"cutoff": cutoff})
    return out


def _deleted(result: object) -> int:
    return int(getattr(result, "rowcount", 0) or 0)
