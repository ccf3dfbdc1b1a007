"""Anomalies (the alerts agents raised): filtered listing, counts of flagged records over time, one with its
explanation, acknowledgement (one or many, with who and a note; undone the same way), and a live stream
(server-sent events)."""

from __future__ import annotations

import asyncio
import re

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import Caller, admin, authenticate, caller, get_db
from api.filters import alert_filter
from api.jsonsafe import dumps, number
from api.live import LiveFeed, live_slots
from api.pagination import CURSOR, decode_cursor, encode_cursor
from api.schemas import ID_PATTERN, AckBody, AckResult, AnomalyOut, BulkAck, BulkIds, CountsOut, Page
from api.validation import ALERT_ID_PATTERN
from store.alerts import flow_problem, incident_problem
from store.db import Alert, AlertFields, utcnow
from store.triage import AlertFilter, acknowledge, flagged_counts, unacknowledge
from wire.flows import finite

router = APIRouter(prefix="/api/v1/anomalies", tags=["anomalies"])
ALERT_ID = Path(..., pattern=ALERT_ID_PATTERN)
_LINE_BREAKS = re.compile(r"[\r\n\x00]")


def anomaly_out(a: AlertFields) -> AnomalyOut:
    """The alert as served, whatever the row holds: an explanation that is not a list of objects is
    served as [], a score or threshold that is not a finite number as null."""
    explanation = [finite(e) for e in a.explanation if isinstance(e, dict)] if isinstance(a.explanation, list) else []
    return AnomalyOut(id=a.id, device_id=a.device_id, job_id=a.job_id, model_version=a.model_version, ts=a.ts,
                      received=a.received, score=number(a.score), threshold=number(a.threshold), count=a.count,
                      acknowledged=bool(a.acknowledged), acknowledged_at=a.acknowledged_at,
                      acknowledged_by=a.acknowledged_by, ack_note=a.ack_note, explanation=explanation,
                      incident_id=a.incident_id,
                      flow=a.flow if isinstance(a.flow, dict) and flow_problem(a.flow) is None else None,
                      incident=a.incident if isinstance(a.incident, dict) and not incident_problem(a.incident)
                      else None)


def sse_event(a: Alert) -> str:
    """One `anomaly` event: the data one line of JSON, the id without the line breaks that would end it."""
    event_id = _LINE_BREAKS.sub("", a.id)
    return f"event: anomaly\nid: {event_id}\ndata: {dumps(anomaly_out(a).model_dump(mode='json'))}\n\n"


def still_allowed(request: Request, db: Session) -> bool:
    try:
        authenticate(request, db)
        return True
    except HTTPException:
        return False


@router.get("", response_model=Page, dependencies=[Depends(caller)])
def list_anomalies(f: AlertFilter = Depends(alert_filter), limit: int = Query(50, ge=1, le=500),
                   cursor: str | None = CURSOR, db: Session = Depends(get_db)) -> Page:
    """Newest first, filtered by the database over every stored anomaly. Pass `next_cursor` back as `cursor`
    for the next page. Times without a UTC offset are UTC."""
    q = f.apply(select(Alert))
    if cursor:
        ts, alert_id = decode_cursor(cursor, ("ts", "id"))
        q = q.where(tuple_(Alert.ts, Alert.id) < tuple_(ts, alert_id))
    rows = list(db.scalars(q.order_by(Alert.ts.desc(), Alert.id.desc()).limit(limit + 1)))
    nxt = encode_cursor([rows[limit - 1].ts.isoformat(), rows[limit - 1].id]) if len(rows) > limit else None
    return Page(items=[anomaly_out(a) for a in rows[:limit]], next_cursor=nxt)


@router.get("/counts", response_model=CountsOut, dependencies=[Depends(caller)])
def counts(f: AlertFilter = Depends(alert_filter), buckets: int = Query(48, ge=1, le=500),
           db: Session = Depends(get_db)) -> CountsOut:
    """Flagged records (not rows: an incident update stands for all of its records), alerts, incidents and
    devices matching the filter, and flagged records over time in about `buckets` buckets of a round length
    (a minute, 30 minutes, an hour, ...) covering [since, until) (default: the last 24 hours)."""
    return CountsOut(**flagged_counts(db, f, buckets))


@router.get("/stream", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}, "description": "one `anomaly` event per alert"},
                       429: {"description": "too many live feeds open, for this key or in all"}})
async def stream(request: Request, who: Caller = Depends(caller), device: str | None = Query(None, pattern=ID_PATTERN),
                 device_prefix: str | None = Query(None, pattern=ID_PATTERN),
                 min_score: float | None = Query(None, ge=0, le=1e300)) -> StreamingResponse:
    """Server-sent events: every anomaly stored from now on, as JSON, as it arrives. The stream ends when
    its caller's session ends or key is revoked (checked every few seconds). Feeds open at once are capped per key
    and in all (429 beyond); their database reads run off the event loop, so feeds never hold up other requests."""
    sessions = request.app.state.sessions
    slots = live_slots(request)
    problem = slots.take(who.key_id)
    if problem:
        raise HTTPException(429, problem)
    q = AlertFilter(device=device, device_prefix=device_prefix, min_score=min_score).apply(select(Alert))

    def opened() -> LiveFeed:
        with sessions() as s:
            return LiveFeed.open(s, utcnow())

    def poll(feed: LiveFeed, check: bool) -> list[Alert] | None:
        with sessions() as s:
            if check and not still_allowed(request, s):
                return None
            return feed.poll(s, q)

    try:
        feed = await run_in_threadpool(opened)
    except BaseException:
        slots.give(who.key_id)
        raise

    async def events():
        try:
            yield "retry: 2000\n\n"
            polls = 0
            while not await request.is_disconnected():
                polls += 1
                rows = await run_in_threadpool(poll, feed, polls % 10 == 0)
                if rows is None:
                    return
                for a in rows:
                    yield sse_event(a)
                yield ": keep-alive\n\n"
                await asyncio.sleep(0.5)
        finally:
            slots.give(who.key_id)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.get("/{alert_id}", response_model=AnomalyOut, dependencies=[Depends(caller)])
def get_anomaly(alert_id: str = ALERT_ID, db: Session = Depends(get_db)) -> AnomalyOut:
    return anomaly_out(_get(db, alert_id))


@router.post("/ack", response_model=AckResult)
def acknowledge_many(body: BulkAck, who: Caller = Depends(admin), db: Session = Depends(get_db)) -> AckResult:
    """Acknowledge several anomalies at once (admin), recording who and the note."""
    changed = acknowledge(db, who.who, body.note, ids=body.ids)
    db.commit()
    return AckResult(changed=changed)


@router.post("/unack", response_model=AckResult)
def unacknowledge_many(body: BulkIds, who: Caller = Depends(admin), db: Session = Depends(get_db)) -> AckResult:
    """Take several acknowledgements back (admin)."""
    changed = unacknowledge(db, who.who, ids=body.ids)
    db.commit()
    return AckResult(changed=changed)


@router.post("/{alert_id}/ack", response_model=AnomalyOut)
def acknowledge_one(body: AckBody | None = None, alert_id: str = ALERT_ID, who: Caller = Depends(admin),
                    db: Session = Depends(get_db)) -> AnomalyOut:
    """Acknowledge (admin), with an optional note; the acknowledgement records the key's name (or id). An
    anomaly acknowledged already keeps its first acknowledgement."""
    a = _get(db, alert_id)
    acknowledge(db, who.who, body.note if body else None, ids=[a.id])
    db.commit()
    db.refresh(a)
    return anomaly_out(a)


@router.post("/{alert_id}/unack", response_model=AnomalyOut)
def unacknowledge_one(alert_id: str = ALERT_ID, who: Caller = Depends(admin), db: Session = Depends(get_db)
                      ) -> AnomalyOut:
    """Take an acknowledgement back (admin): the anomaly is open again."""
    a = _get(db, alert_id)
    unacknowledge(db, who.who, ids=[a.id])
    db.commit()
    db.refresh(a)
    return anomaly_out(a)


def _get(db: Session, alert_id: str) -> Alert:
    a = db.get(Alert, alert_id)
    if a is None:
        raise HTTPException(404, f"no anomaly {alert_id!r}")
    return a
