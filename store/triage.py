"""What an analyst does with stored alerts: filter them, count the flagged records they hold, group incident
updates into incidents, acknowledge (with who and why) and take an acknowledgement back.

Everything is a query the database answers (filters, grouping, counts, time buckets), so it holds over all
stored alerts, not a page of them, on SQLite and PostgreSQL alike. The API and the command line call these."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, case, distinct, func, select, tuple_, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import Subquery

from store.alerts import EARLIEST, incident_problem
from store.db import Alert, utcnow
from store.keyset import latest_first
from store.rollup import grain_for, scored_grain, tallied

log = logging.getLogger("fedsentry.triage")
#: acknowledgements changed by one call at most (a bulk acknowledgement names its alerts)
MAX_BULK = 1000
#: example flows served per incident
INCIDENT_SAMPLES = 10
#: time buckets come in these lengths (seconds): the shortest at least as long as asked, so they start on the minute,
#: the hour, the day
SPANS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


@dataclass(frozen=True)
class AlertFilter:
    """Which alerts: `device` one device, `device_prefix` every device whose id starts so; times are naive
    UTC, `until` excluded."""

    device: str | None = None
    device_prefix: str | None = None
    job: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    min_score: float | None = None
    acknowledged: bool | None = None
    incident: str | None = None

    def apply(self, q: Select, of: Any = Alert, times: bool = True, scores: bool = True) -> Select:
        """q with these conditions on the columns of `of` (Alert, or store.db.AlertTally: no time nor score);
        `times` False: without since and until (store.rollup cuts the window itself); `scores` False: without
        min_score (store.rollup: tallies and bands)."""
        if self.device:
            q = q.where(of.device_id == self.device)
        if self.device_prefix:
            q = q.where(of.device_id.startswith(self.device_prefix, autoescape=True))
        if self.job:
            q = q.where(of.job_id == self.job)
        if self.since and times:
            q = q.where(of.ts >= self.since)
        if self.until and times:
            q = q.where(of.ts < self.until)
        if self.min_score is not None and scores:
            q = q.where(of.score >= self.min_score)
        if self.acknowledged is not None:
            q = q.where(of.acknowledged.is_(self.acknowledged))
        if self.incident:
            q = q.where(of.incident_id == self.incident)
        return q


# -- acknowledgement ------------------------------------------------------------------------------------------
def acknowledge(session: Session, by: str, note: str | None = None, ids: list[str] | None = None,
                incident: str | None = None) -> int:
    """Acknowledge the named alerts, or every update of an incident, recording who and why; alerts already
    acknowledged keep their first acknowledgement. Returns how many changed."""
    q = update(Alert).where(Alert.acknowledged.is_(False), _which(ids, incident))
    n = _changed(session.execute(q.values(acknowledged=True, acknowledged_at=utcnow(), acknowledged_by=by,
                                          ack_note=note or None)))
    log.info("acknowledged by=%s alerts=%d incident=%s ids=%d note=%r", by, n, incident, len(ids or ()), note)
    return n


def unacknowledge(session: Session, by: str, ids: list[str] | None = None, incident: str | None = None) -> int:
    """Take acknowledgements back (the alerts are open again; the log keeps who did). Returns how many
    changed."""
    q = update(Alert).where(Alert.acknowledged.is_(True), _which(ids, incident))
    n = _changed(session.execute(q.values(acknowledged=False, acknowledged_at=None, acknowledged_by=None,
                                          ack_note=None)))
    log.info("unacknowledged by=%s alerts=%d incident=%s ids=%d", by, n, incident, len(ids or ()))
    return n


def _which(ids: list[str] | None, incident: str | None) -> Any:
    if (ids is None) == (incident is None):
        raise ValueError("name either alert ids or an incident")
    if ids is not None and len(ids) > MAX_BULK:
        raise ValueError(f"at most {MAX_BULK} alerts at once")
    return Alert.id.in_(ids) if ids is not None else Alert.incident_id == incident


def _changed(result: Any) -> int:
    return int(result.rowcount or 0)


# -- counts -----------------------------------------------------------------------------------------------------
# the sums read whole days and hours from the tallies the database keeps (store.rollup), so a month costs about
# what a day does; `rollups=False` reads alerts alone (the same answer: the equivalence tests compare them)
def flagged_counts(session: Session, f: AlertFilter, buckets: int = 48, rollups: bool = True) -> dict[str, Any]:
    """Flagged records (an incident update counts all of its own), alerts, incidents, devices and the
    unacknowledged records among them, and flagged records over time in about `buckets` buckets covering
    [since, until) (defaults: the 24 hours up to now), each of a round length (SPANS) starting on a multiple of
    it."""
    window = _window(f)
    grain = scored_grain(session, window) if rollups else None
    totals = session.execute(_totals(tallied(session, window, grain), grouped=grain is None)).one()
    span, series = flagged_series(session, window, buckets, rollups)
    return {"since": window.since, "until": window.until, "alerts": int(totals[0]), "records": int(totals[1]),
            "unacknowledged_records": int(totals[2]), "incidents": int(totals[3]), "devices": int(totals[4]),
            "bucket_seconds": span, "series": series}


def _window(f: AlertFilter) -> AlertFilter:
    """The filter with both ends set (any time a datetime holds, from year 1 to 9999, is a valid end)."""
    until = f.until or utcnow()
    since = f.since or (until - timedelta(days=1) if until > datetime.min + timedelta(days=1) else datetime.min)
    return replace(f, since=since, until=until)


def _totals(rows: Subquery, grouped: bool) -> Select:
    """Alerts, records, unacknowledged records, incidents and devices of the rows (store.rollup.tallied)."""
    unacknowledged = case((rows.c.acknowledged.is_(False), rows.c.records), else_=0)
    if not grouped:  # tallies: a few ten thousand rows, counted at once
        return _sums(rows.c.alerts, rows.c.records, unacknowledged, rows.c.incident_id, rows.c.device_id)
    # every alert of the window: hashed into (device, incident) groups first, a few thousand rows are left to count
    # (PostgreSQL sorts every row for each COUNT(DISTINCT); an incident id belongs to one device: it hashes its id)
    g = (select(rows.c.device_id, rows.c.incident_id, func.sum(rows.c.alerts).label("alerts"),
                func.sum(rows.c.records).label("records"), func.sum(unacknowledged).label("open"))
         .group_by(rows.c.device_id, rows.c.incident_id)).subquery()
    return _sums(g.c.alerts, g.c.records, g.c.open, g.c.incident_id, g.c.device_id)


def _sums(alerts: Any, records: Any, unacknowledged: Any, incident: Any, device: Any) -> Select:
    return select(func.coalesce(func.sum(alerts), 0), func.coalesce(func.sum(records), 0),
                  func.coalesce(func.sum(unacknowledged), 0), func.count(distinct(func.nullif(incident, ""))),
                  func.count(distinct(device)))


def flagged_series(session: Session, f: AlertFilter, buckets: int = 48, rollups: bool = True
                   ) -> tuple[int, list[dict[str, Any]]]:
    """Flagged records over time (flagged_counts' series alone, as the chart draws it): the bucket length and the
    buckets."""
    window = _window(f)
    assert window.since is not None and window.until is not None
    first = max(window.since, _naive(EARLIEST))  # no alert is older: the series need not reach back further
    if window.until <= first:  # a window wholly before the first possible alert holds none
        return _span((window.until - window.since).total_seconds() / buckets), []
    span = _span((window.until - first).total_seconds() / buckets)
    start = math.floor(_unix(first) / span) * span
    rows = tallied(session, window, scored_grain(session, window, span) if rollups else None, distinct=False)
    slot = (rows.c.t - start) // span
    per = dict(session.execute(select(slot, func.sum(rows.c.records)).group_by(slot)).all())
    n = math.ceil((_unix(window.until) - start) / span)
    return span, [{"start": _naive(start + i * span), "records": int(per.get(i, 0))} for i in range(n)]


def _span(seconds: float) -> int:
    return next((s for s in SPANS if s >= seconds), math.ceil(seconds / SPANS[-1]) * SPANS[-1])


def records_per_device(session: Session, f: AlertFilter, limit: int = 60, rollups: bool = True
                       ) -> list[tuple[str, int]]:
    """Flagged records per device, the devices with most first."""
    rows = tallied(session, f, grain_for(f) if rollups else None)
    total = func.sum(rows.c.records)
    q = select(rows.c.device_id, total).group_by(rows.c.device_id).order_by(total.desc(), rows.c.device_id)
    return [(d, int(n)) for d, n in session.execute(q.limit(limit))]


def _unix(t: datetime) -> float:
    return (t - datetime(1970, 1, 1)).total_seconds()


def _naive(seconds: float) -> datetime:
    return datetime(1970, 1, 1) + timedelta(seconds=seconds)


# -- incidents ----------------------------------------------------------------------------------------------------
def incidents(session: Session, f: AlertFilter, limit: int, after: tuple[datetime, str] | None = None,
              paged: bool = True) -> tuple[list[dict[str, Any]], tuple[datetime, str] | None]:
    """A page of incidents, the latest update first, and where the next page starts (None at the end).

    An incident adds up its updates: `count` flagged records, `updates`, first and last record seen, the worst
    score, example flows; it is acknowledged when every update is (an update arriving after an acknowledgement
    opens it again). `paged` False: every incident grouped, then sorted (the same page: the tests compare them)."""
    last = func.max(Alert.ts)
    all_acked = func.min(case((Alert.acknowledged.is_(True), 1), else_=0))
    q = (replace(f, acknowledged=None).apply(
        select(Alert.incident_id, Alert.device_id, func.max(Alert.job_id), func.sum(Alert.count), func.count(),
               last, func.max(Alert.score), all_acked, func.min(Alert.ts)))
         .where(Alert.incident_id.is_not(None)).group_by(Alert.incident_id, Alert.device_id))
    if f.acknowledged is not None:
        q = q.having(all_acked == (1 if f.acknowledged else 0))
    if after is not None:
        q = q.having(tuple_(last, Alert.incident_id) < tuple_(*after))
    q = q.order_by(last.desc(), Alert.incident_id.desc())
    rows = _page(session, f, q, limit, after) if paged and not f.incident else \
        session.execute(q.limit(limit + 1)).all()
    page = [{"id": r[0], "device_id": r[1], "job_id": r[2], "count": int(r[3]), "updates": r[4], "last_update": r[5],
             "max_score": r[6], "acknowledged": bool(r[7])} for r in rows[:limit]]
    # every update of the page's incidents lies between their first and last ones when the filter keeps whole
    # incidents (device, prefix, incident: an incident is one device's), so their details read those days alone
    whole = f.since is None and f.until is None and f.min_score is None and f.job is None
    _details(session, page, (min(r[8] for r in rows[:limit]), max(r[5] for r in rows[:limit])) if whole and page
             else None)
    nxt = (rows[limit - 1][5], rows[limit - 1][0]) if len(rows) > limit else None
    return page, nxt


def _page(session: Session, f: AlertFilter, grouped: Select, limit: int, after: tuple[datetime, str] | None
          ) -> list[Any]:
    """The page's rows of `grouped` (store.keyset): the incidents met reading updates newest first, grouped, until
    limit + 1 of them are met."""
    found: set[str] = set()
    upper, k = (after[0] if after else None), 4 * (limit + 1)
    while True:
        more, end = latest_first(session, replace(f, acknowledged=None), upper, k)
        found |= more
        rows = session.execute(grouped.where(Alert.incident_id.in_(found))).all() if found else []
        if end is None or len(rows) > limit:  # any incident not met has its latest update before those met
            return list(rows[:limit + 1])
        upper, k = end, 2 * k


def incident(session: Session, incident_id: str) -> dict[str, Any] | None:
    page, _ = incidents(session, AlertFilter(incident=incident_id), 1)
    return page[0] if page else None


def _details(session: Session, page: list[dict[str, Any]], between: tuple[datetime, datetime] | None = None) -> None:
    """Key, window, first and last record, examples and the latest acknowledgement, from the updates (all of them
    lie `between` those times when given: on PostgreSQL the other days' partitions are not read)."""
    by_id = {g["id"]: g for g in page}
    for g in page:
        g.update(key="", features=[], window=None, first=None, last=None, samples=[], acknowledged_by=None,
                 ack_note=None, acknowledged_at=None)
    if not by_id:
        return
    q = (select(Alert.incident_id, Alert.incident, Alert.acknowledged_at, Alert.acknowledged_by, Alert.ack_note)
         .where(Alert.incident_id.in_(list(by_id))).order_by(Alert.ts))
    if between is not None:
        q = q.where(Alert.ts >= between[0], Alert.ts <= between[1])
    for iid, inc, at, by, note in session.execute(q):
        g = by_id[iid]
        if not isinstance(inc, dict) or incident_problem(inc):
            continue
        first, latest = _naive(float(inc["first"])), _naive(float(inc["last"]))
        g.update(key=inc["key"], features=inc["key"].split("+"), window=_naive(float(inc["window"])),
                 first=min(g["first"] or first, first), last=max(g["last"] or latest, latest))
        g["samples"] = (g["samples"] + list(inc.get("samples") or []))[:INCIDENT_SAMPLES]
        if at is not None and (g["acknowledged_at"] is None or at >= g["acknowledged_at"]):
            g.update(acknowledged_at=at, acknowledged_by=by, ack_note=note)
    for g in page:  # updates stored before incidents were checked: their update times stand in
        g["first"], g["last"] = g["first"] or g["last_update"], g["last"] or g["last_update"]
