"""Incidents: flagged records past a device's alert budget, grouped by the device, the features that explain
them and the rate limiter's window. Each incident update an agent sends is an anomaly row whose `count` is
its new records; an incident adds them up (the database groups them: every stored update counts)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from sqlalchemy.orm import Session

from api.deps import Caller, admin, caller, get_db
from api.filters import INCIDENT_ID_PATTERN, alert_filter
from api.pagination import CURSOR, decode_cursor, encode_cursor
from api.schemas import AckBody, IncidentOut, Page
from store import triage
from store.triage import AlertFilter

router = APIRouter(prefix="/api/v1/incidents", tags=["incidents"])
INCIDENT_ID = Path(..., pattern=INCIDENT_ID_PATTERN)


@router.get("", response_model=Page, dependencies=[Depends(caller)])
def list_incidents(f: AlertFilter = Depends(alert_filter), limit: int = Query(50, ge=1, le=500),
                   cursor: str | None = CURSOR, db: Session = Depends(get_db)) -> Page:
    """Newest update first; `items` are incidents. `count` is every flagged record of the incident (within
    `since`/`until` when given). `acknowledged=false`: incidents with an update not acknowledged yet."""
    after = tuple(decode_cursor(cursor, ("ts", "id"))) if cursor else None
    page, nxt = triage.incidents(db, f, limit, after)
    return Page(items=[IncidentOut(**g) for g in page],
                next_cursor=encode_cursor([nxt[0].isoformat(), nxt[1]]) if nxt else None)


@router.get("/{incident_id}", response_model=IncidentOut, dependencies=[Depends(caller)])
def get_incident(incident_id: str = INCIDENT_ID, db: Session = Depends(get_db)) -> IncidentOut:
    """One incident; its updates (each with its worst record's explanation) are
    /api/v1/anomalies?incident={id}."""
    return IncidentOut(**_get(db, incident_id))


@router.post("/{incident_id}/ack", response_model=IncidentOut)
def acknowledge(body: AckBody | None = None, incident_id: str = INCIDENT_ID, who: Caller = Depends(admin),
                db: Session = Depends(get_db)) -> IncidentOut:
    """Acknowledge every update of the incident (admin), recording who and the note."""
    _get(db, incident_id)
    triage.acknowledge(db, who.who, body.note if body else None, incident=incident_id)
    db.commit()
    return IncidentOut(**_get(db, incident_id))


@router.post("/{incident_id}/unack", response_model=IncidentOut)
def unacknowledge(incident_id: str = INCIDENT_ID, who: Caller = Depends(admin), db: Session = Depends(get_db)
                  ) -> IncidentOut:
    """Take the incident's acknowledgements back (admin)."""
    _get(db, incident_id)
    triage.unacknowledge(db, who.who, incident=incident_id)
    db.commit()
    return IncidentOut(**_get(db, incident_id))


def _get(db: Session, incident_id: str) -> dict:
    g = triage.incident(db, incident_id)
    if g is None:
        raise HTTPException(404, f"no incident {incident_id!r}")
    return g



