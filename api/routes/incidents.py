"""Incidents: flagged records past a device's alert budget, grouped by the device, the features that explain
them and the rate limiter's window. Each incident update an agent sends is an anomaly row whose `count` is
its new records; an incident here adds them up."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import caller, get_db
from api.schemas import ID_PATTERN, IncidentOut
from api.validation import utc_naive
from coordinator.alerts import incident_problem
from coordinator.db import Alert, utcnow

router = APIRouter(prefix="/api/v1/incidents", tags=["incidents"])

#: incident updates read per request (newest first): incidents are aggregated from them
SCAN = 20_000


@router.get("", response_model=list[IncidentOut], dependencies=[Depends(caller)])
def list_incidents(device: str | None = Query(None, pattern=ID_PATTERN, description="device id prefix"),
                   since: datetime | None = Query(None, description="default: the last 24 hours"),
                   limit: int = Query(100, ge=1, le=1000), db: Session = Depends(get_db)) -> list[IncidentOut]:
    """Newest first (by last record seen). `count` is every flagged record of the incident."""
    since = utc_naive(since, "query.since") or utcnow() - timedelta(days=1)
    q = select(Alert).where(Alert.ts >= since).order_by(Alert.ts.desc()).limit(SCAN)
    if device:
        q = q.where(Alert.device_id.startswith(device, autoescape=True))
    grouped: dict[tuple[str, str, float], dict[str, Any]] = {}
    for a in db.scalars(q):
        inc = a.incident
        if not isinstance(inc, dict) or incident_problem(inc):
            continue
        k = (a.device_id, inc["key"], float(inc["window"]))
        g = grouped.get(k)
        if g is None:
            g = grouped[k] = {"device_id": a.device_id, "key": inc["key"], "features": inc["key"].split("+"),
                              "window": _utc(float(inc["window"])), "count": 0, "updates": 0,
                              "first": float(inc["first"]), "last": float(inc["last"]), "max_score": a.score,
                              "job_id": a.job_id, "samples": [], "acknowledged": True}
        g["count"] += int(a.count)
        g["updates"] += 1
        g["first"], g["last"] = min(g["first"], float(inc["first"])), max(g["last"], float(inc["last"]))
        g["max_score"] = max(g["max_score"], a.score)
        g["samples"] = (g["samples"] + list(inc.get("samples", [])))[:10]
        g["acknowledged"] = g["acknowledged"] and bool(a.acknowledged)
    out = sorted(grouped.values(), key=lambda g: g["last"], reverse=True)[:limit]
    for g in out:
        g["first"], g["last"] = _utc(g["first"]), _utc(g["last"])
    return [IncidentOut(**g) for g in out]


def _utc(ts: float) -> datetime:
    """A Unix time as the naive UTC datetime the database and the other routes use."""
    return datetime.fromtimestamp(ts, timezone.utc).replace(tzinfo=None)
