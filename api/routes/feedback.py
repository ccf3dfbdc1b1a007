"""False-positive feedback (store.feedback): an admin marks an alert, a flagged record or a whole incident as a false
positive; the device raises its threshold so that those records would not be flagged again (within a cap), and,
only with its consent, learns from them. The effect is what the device reports."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import Caller, admin, caller, get_db
from api.filters import INCIDENT_ID_PATTERN
from api.schemas import ID_PATTERN
from api.validation import ALERT_ID_PATTERN, Note, UtcTime, field_problem, found
from store import feedback
from store.db import Feedback

router = APIRouter(prefix="/api/v1/feedback", tags=["feedback"])
FEEDBACK_ID = Path(..., pattern=r"^[0-9a-f]{32}$")


class FeedbackIn(BaseModel):
    """Exactly one of alert, record and incident, and a reason."""

    model_config = ConfigDict(extra="forbid")

    reason: Note = Field(description="why it is a false positive (audited)")
    alert: str | None = Field(None, pattern=ALERT_ID_PATTERN, description="an alert (an incident update: its records)")
    record: str | None = Field(None, max_length=80, pattern=r"^[0-9a-f]{1,80}$", description="a flagged record")
    incident: str | None = Field(None, pattern=INCIDENT_ID_PATTERN, description="every alert and record of an incident")

    @model_validator(mode="after")
    def one_target(self) -> FeedbackIn:
        if sum(x is not None for x in (self.alert, self.record, self.incident)) != 1:
            raise ValueError("give exactly one of alert, record and incident")
        return self


class FeedbackOut(BaseModel):
    id: str
    device_id: str
    target: str = Field(description="alert, record or incident")
    target_id: str
    reason: str
    created: UtcTime
    created_by: str
    removed: UtcTime | None
    removed_by: str | None
    active: bool
    records: int = Field(description="flagged records the action marked")
    sent: int = Field(description="of them, sent to the device (the highest scores, at most 512)")
    delivered: bool = Field(description="the device's feedback was sent since this action (or its undoing)")
    effect: dict[str, Any] | None = Field(description="what the device reported: its threshold before and after this "
                                                      "action, the cap, whether the cap held it back (capped), records "
                                                      "applied, stale (of another model, no longer kept), trained")
    training: str = Field(description="whether the marked records join the device's training (its consent)")


def training_text(effect: dict[str, Any] | None) -> str:
    if effect is None:
        return "not reported yet: the device applies feedback when it is next connected"
    if not effect.get("training"):
        return "not used: the device did not consent (its agent runs without --feedback-training)"
    return f"{effect.get('trained', 0)} marked records joined the device's next training job as normal records"


def _out(f: Feedback) -> FeedbackOut:
    return FeedbackOut(id=f.id, device_id=f.device_id, target=f.target, target_id=f.target_id, reason=f.reason,
                       created=f.created, created_by=f.created_by, removed=f.removed, removed_by=f.removed_by,
                       active=f.removed is None, records=f.records, sent=len(f.entries), delivered=f.published,
                       effect=f.effect, training=training_text(f.effect))


@router.post("", response_model=FeedbackOut, status_code=201)
def create(body: FeedbackIn, who: Caller = Depends(admin), db: Session = Depends(get_db)) -> FeedbackOut:
    target, target_id = next((k, v) for k, v in (("alert", body.alert), ("record", body.record),
                                                  ("incident", body.incident)) if v is not None)
    try:
        fb = feedback.create(db, target, target_id, body.reason, who.who)
    except feedback.NotFoundError as e:
        raise HTTPException(404, str(e)) from None
    except feedback.ConflictError as e:
        raise HTTPException(409, str(e)) from None
    except ValueError as e:
        raise field_problem(e) from None
    db.commit()
    return _out(fb)


@router.get("", response_model=list[FeedbackOut], dependencies=[Depends(caller)])
def list_feedback(device: str | None = Query(None, pattern=ID_PATTERN, description="one device's"),
                  db: Session = Depends(get_db)) -> list[FeedbackOut]:
    """Every action, the newest first, undone ones too (the audit)."""
    q = select(Feedback).order_by(Feedback.created.desc()).limit(1000)
    if device is not None:
        q = q.where(Feedback.device_id == device)
    return [_out(f) for f in db.scalars(q)]


@router.delete("/{feedback_id}", response_model=FeedbackOut)
def remove(feedback_id: str = FEEDBACK_ID, who: Caller = Depends(admin), db: Session = Depends(get_db)) -> FeedbackOut:
    """Undo the action (recorded, not deleted): the device is sent its feedback without it."""
    fb = found(feedback.remove(db, feedback_id, who.who), f"no feedback {feedback_id!r}")
    db.commit()
    return _out(fb)
