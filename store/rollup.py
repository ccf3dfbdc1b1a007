"""Where the counts and charts add up alerts from (issue 24, point 6): a window's whole days and whole hours from
alert_tallies (store.db.AlertTally, kept by the database at every change of alerts), the partial hours at its ends
from alerts itself, as one row source (`tallied`) with the columns the sums read: t (Unix seconds: the tally's
start, the alert's time), device_id, incident_id ('' for none), acknowledged, alerts, records.

The answers are the alerts table's exactly: a tally holds the alerts whose time is in [start, start + span). A filter
the tallies cannot answer (a minimum score) reads the window's alerts from alerts, as `grain=None` does: through the
score index (migration 0017) when few pass, so the cost follows the alerts at or above the score, not the window."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import BigInteger, Select, cast, func, literal, select, union_all
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import Subquery

from store.db import Alert, AlertTally

HOUR, DAY = 3600, 86400
EPOCH = datetime(1970, 1, 1)


class Filter(Protocol):
    """What store.triage.AlertFilter offers: its time bounds, and its other conditions on alerts or tallies."""

    @property
    def since(self) -> datetime | None: ...
    @property
    def until(self) -> datetime | None: ...
    @property
    def min_score(self) -> float | None: ...
    def apply(self, q: Select, of: Any = Alert, times: bool = True) -> Select: ...


def epoch(session: Session) -> Any:
    """Alert.ts as whole Unix seconds (truncated), in the database's own dialect."""
    if session.get_bind().dialect.name == "postgresql":  # date_part is a float; extract a (slower) numeric
        return cast(func.floor(func.date_part("epoch", Alert.ts)), BigInteger)
    # strftime would round a fraction of a second to the millisecond (23:59:59.9999 to the next day)
    return cast(func.strftime("%s", func.substr(Alert.ts, 1, 19)), BigInteger)


def grain_for(f: Filter, span: int = DAY) -> int | None:
    """The longest tally that fits `span`-second buckets (DAY, HOUR), or None: only alerts can answer."""
    if f.min_score is not None:
        return None
    return DAY if span % DAY == 0 else HOUR if span % HOUR == 0 else None


def tallied(session: Session, f: Filter, grain: int | None) -> Subquery:
    """The rows to add up for the alerts `f` selects: tallies of `grain` and shorter where whole ones fit the
    window, alerts elsewhere (everywhere for grain None)."""
    parts = []
    for span, lo, hi in pieces(f.since, f.until, grain):
        if span is None:
            q = select(epoch(session).label("t"), Alert.device_id,
                       func.coalesce(Alert.incident_id, "").label("incident_id"), Alert.acknowledged,
                       literal(1).label("alerts"), Alert.count.label("records"))  # (integers add up faster)
            q = f.apply(q, times=False)
            parts.append(q.where(*([Alert.ts >= lo] if lo else []), *([Alert.ts < hi] if hi else [])))
        else:
            T = AlertTally
            q = f.apply(select(T.start.label("t"), T.device_id, T.incident_id, T.acknowledged, T.alerts, T.records)
                        .where(T.span == span, T.alerts > 0), of=T, times=False)
            parts.append(q.where(*([T.start >= lo] if lo is not None else []),
                                 *([T.start < hi] if hi is not None else [])))
    return (parts[0] if len(parts) == 1 else union_all(*parts)).subquery()


Piece = tuple[int | None, Any, Any]


def pieces(since: datetime | None, until: datetime | None, grain: int | None) -> list[Piece]:
    """[since, until) (None: unbounded) as (None, from, to) datetimes read from alerts and (span, from, to) Unix
    seconds read from tallies of that span."""
    hours = (None if since is None else _ceil(since, HOUR), None if until is None else _floor(until, HOUR))
    if grain is None or _empty(*hours) or (hours[0] or 0) > _floor(datetime.max, HOUR):
        return [(None, since, until)]  # (an hour past the year 9999 is no datetime)
    h0, h1 = hours
    out: list[Piece] = []
    if since is not None and h0 is not None and _naive(h0) > since:
        out.append((None, since, _naive(h0)))
    if until is not None and h1 is not None and _naive(h1) < until:
        out.append((None, _naive(h1), until))
    days = (None if h0 is None else -(-h0 // DAY) * DAY, None if h1 is None else h1 // DAY * DAY)
    if grain != DAY or _empty(*days):
        return [*out, (HOUR, h0, h1)]
    d0, d1 = days
    out.append((DAY, d0, d1))
    if h0 is not None and d0 is not None and h0 < d0:
        out.append((HOUR, h0, d0))
    if h1 is not None and d1 is not None and d1 < h1:
        out.append((HOUR, d1, h1))
    return out


def _empty(lo: int | None, hi: int | None) -> bool:
    return lo is not None and hi is not None and lo >= hi


def _floor(t: datetime, span: int) -> int:
    return (t - EPOCH) // timedelta(seconds=span) * span


def _ceil(t: datetime, span: int) -> int:
    return -((EPOCH - t) // timedelta(seconds=span)) * span


def _naive(seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=seconds)
