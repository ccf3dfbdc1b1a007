"""The alert filters every alert view shares (anomalies, incidents, counts, charts), as one dependency."""

from __future__ import annotations

from datetime import datetime

from fastapi import HTTPException, Query

from api.schemas import ID_PATTERN
from api.validation import utc_naive
from store.triage import AlertFilter

INCIDENT_ID_PATTERN = r"^[0-9a-f]{20}$"


def alert_filter(
    device: str | None = Query(None, pattern=ID_PATTERN, description="one device's id"),
    device_prefix: str | None = Query(None, pattern=ID_PATTERN, description="devices whose id starts with this"),
    job: str | None = Query(None, pattern=ID_PATTERN),
    since: datetime | None = Query(None, description="from this time on (without a UTC offset: UTC)"),
    until: datetime | None = Query(None, description="before this time (without a UTC offset: UTC)"),
    min_score: float | None = Query(None, ge=0, le=1e300),
    acknowledged: bool | None = None,
    incident: str | None = Query(None, pattern=INCIDENT_ID_PATTERN, description="one incident's updates"),
) -> AlertFilter:
    since, until = utc_naive(since, "query.since"), utc_naive(until, "query.until")
    if since and until and since >= until:
        raise HTTPException(400, [{"field": "query.since", "problem": "since must be before until"}])
    return AlertFilter(device, device_prefix, job, since, until, min_score, acknowledged, incident)
