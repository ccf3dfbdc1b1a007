"""Where the counts and charts add up alerts from (issue 24, point 6): a window's whole days and whole hours from
alert_tallies (store.db.AlertTally, kept by the database at every change of alerts), the partial hours at its ends
from alerts itself, as one row source (`tallied`) with the columns the sums read: t (Unix seconds: the tally's
start, the alert's time), device_id, incident_id ('' for none), acknowledged, alerts, records.

The answers are the alerts table's exactly: a tally holds the alerts whose time is in [start, start + span). A filter
the tallies cannot answer (a minimum score) reads the window's alerts from alerts, as `grain=None` does: through the
score index (migration 0017) when few pass, so the cost follows the alerts at or above the score, not the window."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import BigInteger, Select, String, cast, func, literal, null, select, text, union_all
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import Subquery

from store.db import Alert, AlertBand, AlertTally

HOUR, DAY = 3600, 86400
EPOCH = datetime(1970, 1, 1)
#: score bands (alert_bands, migration 0021) per unit of sign(x) log2(1 + |x|): 1/32 of an octave for scores well
#: above 1, finer below, any finite score in one of about 65,000 bands (no scale of a detector's is assumed)
BANDS = 32
#: under a minimum score, fewer alerts than this reaching it are read from alerts (through the score index) rather
#: than adding up a window of tallies and bands (a month: about 50,000 rows at 200 devices)
FEW = 20_000
#: scores that are no finite number, stored by older versions or written by hand (the API serves them as null): +inf
#: (and PostgreSQL's NaN, which it sorts above every number) in a band above every finite score's, -inf below them
#: (SQLite keeps a NaN as NULL, which the score column refuses)
LARGEST = sys.float_info.max
TOP_BAND = BANDS * 1025


def band_sql(score: str) -> str:
    """The band of a score as SQL (the same text in the triggers and the queries, so that a database puts a score
    and a minimum equal to it in the same band; non-decreasing in the score)."""
    return (f"CASE WHEN {score} > {LARGEST!r} THEN {TOP_BAND} "
            f"WHEN {score} < -{LARGEST!r} THEN -{TOP_BAND} "
            f"ELSE CAST(floor({BANDS} * sign({score}) * ln(1 + abs({score})) / ln(2)) AS INTEGER) END")


def band_top(band: int) -> float | None:
    """A score above every score of `band` (the band's upper edge with room for the database's rounding), or None
    past the largest float."""
    g = (band + 1) / BANDS
    try:
        edge = 2.0 ** g - 1 if g >= 0 else 1 - 2.0 ** -g
    except OverflowError:
        return None
    return edge + abs(edge) * 1e-9 + 1e-300


class Filter(Protocol):
    """What store.triage.AlertFilter offers: its time bounds, and its other conditions on alerts or tallies."""

    @property
    def since(self) -> datetime | None: ...
    @property
    def until(self) -> datetime | None: ...
    @property
    def min_score(self) -> float | None: ...
    @property
    def device(self) -> str | None: ...
    @property
    def device_prefix(self) -> str | None: ...
    @property
    def incident(self) -> str | None: ...
    def apply(self, q: Select, of: Any = Alert, times: bool = True, scores: bool = True) -> Select: ...


def epoch(session: Session) -> Any:
    """Alert.ts as whole Unix seconds (truncated), in the database's own dialect."""
    if session.get_bind().dialect.name == "postgresql":  # date_part is a float; extract a (slower) numeric
        return cast(func.floor(func.date_part("epoch", Alert.ts)), BigInteger)
    # strftime would round a fraction of a second to the millisecond (23:59:59.9999 to the next day)
    return cast(func.strftime("%s", func.substr(Alert.ts, 1, 19)), BigInteger)


def grain_for(f: Filter, span: int = DAY, scored: bool = False) -> int | None:
    """The longest tally that fits `span`-second buckets (DAY, HOUR), or None: only alerts can answer. Under a
    minimum score only with `scored` (sums, series, incidents and devices: the bands hold no device nor incident, so
    not under a device or incident filter either)."""
    if f.min_score is not None and not (scored and f.device is None and not f.device_prefix and f.incident is None):
        return None
    return DAY if span % DAY == 0 else HOUR if span % HOUR == 0 else None


def scored_grain(session: Session, f: Filter, span: int = DAY) -> int | None:
    """grain_for(scored=True), but None (alerts alone, through the score index) where the bands say that fewer than
    FEW alerts of the window's days reach the minimum score: reading those costs less than a window of tallies."""
    grain = grain_for(f, span, scored=True)
    if grain is None or f.min_score is None:
        return grain
    B = AlertBand
    q = select(func.coalesce(func.sum(B.alerts), 0)).where(B.span == DAY, B.band >= _band(session, f.min_score))
    q = f.apply(q, of=B, times=False, scores=False).where(
        *([B.start >= _floor(f.since, DAY)] if f.since is not None else []),
        *([B.start < _ceil(f.until, DAY)] if f.until is not None and f.until < datetime.max - timedelta(days=1)
          else []))
    return grain if (session.scalar(q) or 0) >= FEW else None


def tallied(session: Session, f: Filter, grain: int | None, distinct: bool = True) -> Subquery:
    """The rows to add up for the alerts `f` selects: tallies of `grain` and shorter where whole ones fit the
    window, alerts elsewhere (everywhere for grain None).

    Under a minimum score (grain_for(scored=True)) the whole hours and days add up their bands above the score's
    own (alert_bands: no device, no incident) and that band's alerts at or above the score (through the score
    index); the tallies holding an alert at or above it (`top`) add nothing but name their devices and incidents
    (`distinct` False: without them, for a series)."""
    parts: list[Select] = []
    score = f.min_score if grain is not None else None
    band = None if score is None else _band(session, score)
    whole: list[tuple[Any, Any]] = []
    for span, lo, hi in pieces(f.since, f.until, grain):
        if span is None:
            q = f.apply(_alert_rows(session), times=False)
            parts.append(q.where(*([Alert.ts >= lo] if lo else []), *([Alert.ts < hi] if hi else [])))
            continue
        whole.append((lo, hi))
        T, B = AlertTally, AlertBand
        if score is None:
            q = select(T.start.label("t"), T.device_id, T.incident_id, T.acknowledged, T.alerts, T.records)
        else:
            q = select(T.start.label("t"), T.device_id, T.incident_id, T.acknowledged, literal(0).label("alerts"),
                       literal(0).label("records")).where(T.top >= score)
        if score is None or distinct:
            q = f.apply(q.where(T.span == span, T.alerts > 0), of=T, times=False, scores=False)
            parts.append(_between(q, T, lo, hi))
        if band is not None:
            q = select(B.start.label("t"), cast(null(), String).label("device_id"), literal("").label("incident_id"),
                       B.acknowledged, B.alerts, B.records).where(B.span == span, B.band > band)
            parts.append(_between(f.apply(q, of=B, times=False, scores=False), B, lo, hi))
    if band is not None and whole:  # the score's own band, over the whole hours (one range)
        lo = None if any(w[0] is None for w in whole) else min(w[0] for w in whole)
        hi = None if any(w[1] is None for w in whole) else max(w[1] for w in whole)
        top = band_top(band)
        q = f.apply(_alert_rows(session), times=False)
        parts.append(q.where(text(f"{band_sql('alerts.score')} = :band").bindparams(band=band),
                             *([Alert.score < top] if top is not None else []),
                             *([Alert.ts >= _naive(lo)] if lo is not None else []),
                             *([Alert.ts < _naive(hi)] if hi is not None else [])))
    return (parts[0] if len(parts) == 1 else union_all(*parts)).subquery()


def _alert_rows(session: Session) -> Select:
    return select(epoch(session).label("t"), Alert.device_id, func.coalesce(Alert.incident_id, "").label("incident_id"),
                  Alert.acknowledged, literal(1).label("alerts"),
                  Alert.count.label("records"))  # (integers add up faster)


def _between(q: Select, of: Any, lo: int | None, hi: int | None) -> Select:
    return q.where(*([of.start >= lo] if lo is not None else []), *([of.start < hi] if hi is not None else []))


def _band(session: Session, score: float) -> int:
    """The score's band as this database computes it (the triggers' own expression, on a float like the column)."""
    kind = "DOUBLE PRECISION" if session.get_bind().dialect.name == "postgresql" else "REAL"
    return int(session.scalar(text(f"SELECT {band_sql(f'CAST(:s AS {kind})')}"), {"s": score}))


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
