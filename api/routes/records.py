"""Flagged records: every record past a device's alert budget, kept whole (store.records). An incident's records
are /api/v1/records?incident={id}; a flow is found by its Zeek uid or either address."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, HTTPException, Query
from sqlalchemy.orm import Session

from api.deps import caller, get_db
from api.filters import INCIDENT_ID_PATTERN
from api.pagination import CURSOR, decode_cursor, encode_cursor
from api.schemas import ID_PATTERN, Page, RecordOut
from api.validation import utc_naive
from store.records import find_records

router = APIRouter(prefix="/api/v1/records", tags=["records"])
#: a flow field as stored (wire.flows: escaped, no control characters), at most 64 characters
TEXT = r"^[^\x00-\x1f\x7f]{1,64}$"


@router.get("", response_model=Page, dependencies=[Depends(caller)])
def list_records(
    incident: str | None = Query(None, pattern=INCIDENT_ID_PATTERN, description="one incident's records"),
    device: str | None = Query(None, pattern=ID_PATTERN, description="one device's records"),
    uid: str | None = Query(None, pattern=TEXT, description="a flow's Zeek uid"),
    ip: str | None = Query(None, pattern=TEXT,
                           description="an address, either end of the flow (an IP address in any notation)"),
    since: datetime | None = Query(None, description="from this time on (without a UTC offset: UTC)"),
    until: datetime | None = Query(None, description="before this time (without a UTC offset: UTC)"),
    suppressed: bool = Query(False, description="also the records a suppression rule holds back"),
    suppression: str | None = Query(None, pattern=r"^[0-9a-f]{32}$", description="the records one rule holds back"),
    limit: int = Query(100, ge=1, le=1000),
    cursor: str | None = CURSOR,
    db: Session = Depends(get_db),
) -> Page:
    """Newest first, a page at a time (`next_cursor`)."""
    since, until = utc_naive(since, "query.since"), utc_naive(until, "query.until")
    if since and until and since >= until:
        raise HTTPException(400, [{"field": "query.since", "problem": "since must be before until"}])
    after = decode_cursor(cursor, ("ts", "id")) if cursor else None
    rows, nxt = find_records(db, incident=incident, device=device, uid=uid, ip=ip, since=since, until=until,
                             after=(after[0], after[1]) if after else None, limit=limit, suppressed=suppressed,
                             suppression=suppression)
    items = [RecordOut(id=r.id, alert_id=r.alert_id, device_id=r.device_id, incident_id=r.incident_id, ts=r.ts,
                       score=r.score, threshold=r.threshold, explanation=r.explanation, flow=r.flow) for r in rows]
    return Page(items=items, next_cursor=encode_cursor([nxt[0].isoformat(), nxt[1]]) if nxt else None)
