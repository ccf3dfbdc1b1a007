"""Suppression rules (store.suppress): admins hold back known traffic's alerts; they stay stored and findable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import Caller, admin, caller, get_db
from api.pagination import CURSOR, decode_cursor, encode_cursor
from api.routes.anomalies import anomaly_out
from api.schemas import Page
from api.validation import Note, UtcTime, field_problem, found, utc_naive
from store import suppress
from store.db import SuppressedAlert, Suppression, utcnow

router = APIRouter(prefix="/api/v1/suppressions", tags=["suppressions"])
RULE_ID = Path(..., pattern=r"^[0-9a-f]{32}$")


class SuppressionIn(BaseModel):
    """A rule: every condition given must hold. At least one condition and a reason."""

    model_config = ConfigDict(extra="forbid")

    reason: Note = Field(description="why this traffic is held back (audited)")
    device: str | None = Field(None, max_length=64, description="a device id, or a prefix ending in '*'")
    cidr: str | None = Field(None, max_length=64, description="a network either end of the flow is in")
    port_min: int | None = Field(None, ge=0, le=65535, description="the responder's port (id.resp_p), from")
    port_max: int | None = Field(None, ge=0, le=65535, description="the responder's port, to")
    service: str | None = Field(None, max_length=64)
    feature: str | None = Field(None, max_length=128, description="an explaining feature whose value is in range")
    value_min: float | None = None
    value_max: float | None = None
    expires: datetime | None = Field(None, description="when the rule stops (without a UTC offset: UTC)")
    retroactive: bool = Field(False, description="also hold back the matching alerts of the last 30 days (applied "
                                                 "after the answer, a batch at a time: `retroactive_state`)")


class SuppressionOut(BaseModel):
    id: str
    reason: str
    match: dict[str, Any]
    created: UtcTime
    created_by: str
    expires: UtcTime | None
    removed: UtcTime | None
    removed_by: str | None
    retroactive: int = Field(description="stored alerts and records it held back when created (so far, while "
                                         "`retroactive_state` is running)")
    retroactive_state: str = Field(description="'' (not retroactive), 'running' (being applied to what is stored) "
                                               "or 'done'")
    held: int = Field(description="alerts it held back at ingestion since")
    active: bool


def _out(r: Suppression) -> SuppressionOut:
    active = suppress.state(r, utcnow()) == "active"
    return SuppressionOut(id=r.id, reason=r.reason, match=r.match, created=r.created, created_by=r.created_by,
                          expires=r.expires, removed=r.removed, removed_by=r.removed_by, retroactive=r.retroactive,
                          retroactive_state=r.retro_state, held=r.held, active=active)


@router.post("", response_model=SuppressionOut, status_code=201)
def create(body: SuppressionIn, request: Request, background: BackgroundTasks, who: Caller = Depends(admin),
           db: Session = Depends(get_db)) -> SuppressionOut:
    """A rule applies to what arrives from now on; with `retroactive`, it is also applied to the stored alerts of
    the last 30 days after the answer (`retroactive_state` "running" until it is done)."""
    fields = body.model_dump(exclude={"reason", "expires", "retroactive"})
    try:
        match = suppress.Match.parse(fields)
        rule = suppress.create(db, match, body.reason, who.who, utc_naive(body.expires, "body.expires"),
                               body.retroactive)
    except ValueError as e:
        raise field_problem(e) from None
    db.commit()
    if body.retroactive:
        background.add_task(suppress.apply_retroactive, request.app.state.sessions, rule.id)
    return _out(rule)


@router.get("", response_model=list[SuppressionOut], dependencies=[Depends(caller)])
def list_rules(db: Session = Depends(get_db)) -> list[SuppressionOut]:
    """Every rule, the newest first, removed and expired ones too (the audit)."""
    return [_out(r) for r in db.scalars(select(Suppression).order_by(Suppression.created.desc()).limit(1000))]


@router.delete("/{rule_id}", response_model=SuppressionOut)
def remove(rule_id: str = RULE_ID, who: Caller = Depends(admin), db: Session = Depends(get_db)) -> SuppressionOut:
    """Stop the rule (recorded, not deleted); what it held back stays held back."""
    rule = found(suppress.remove(db, rule_id, who.who), f"no suppression rule {rule_id!r}")
    db.commit()
    return _out(rule)


@router.get("/{rule_id}/alerts", response_model=Page, dependencies=[Depends(caller)])
def held_alerts(rule_id: str = RULE_ID, limit: int = Query(50, ge=1, le=500), cursor: str | None = CURSOR,
                db: Session = Depends(get_db)) -> Page:
    """The alerts the rule held back, newest first (their records: /api/v1/records?suppression={id})."""
    q = select(SuppressedAlert).where(SuppressedAlert.suppression_id == rule_id)
    if cursor:
        ts, i = decode_cursor(cursor, ("ts", "id"))
        q = q.where((SuppressedAlert.ts < ts) | ((SuppressedAlert.ts == ts) & (SuppressedAlert.id < i)))
    rows = list(db.scalars(q.order_by(SuppressedAlert.ts.desc(), SuppressedAlert.id.desc()).limit(limit + 1)))
    nxt = rows[limit - 1] if len(rows) > limit else None
    items = [anomaly_out(r) for r in rows[:limit]]
    return Page(items=items, next_cursor=encode_cursor([nxt.ts.isoformat(), nxt.id]) if nxt else None)
