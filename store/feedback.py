"""False-positive feedback (issue 24, point 3): an analyst marks an alert, a flagged record or a whole incident as a
false positive, with a reason; the records it marks go to their device as scores (`device_feedback`, sent by the
coordinator), which raises its threshold so that they would not be flagged again, never above a cap
(models.detection.threshold.feedback_cap), and reports the effect (`record_effect`): the threshold before and
after, how many records it covered, whether the cap held it back, and whether the device used them for training
(only with its consent). Undoing an action is recorded, never deleted; the device's threshold goes back as the
coordinator sends the list without it.

One action sends at most ENTRIES_PER_ACTION records (the highest scores: the threshold needs the highest, training
is the device's consent's business); a device holds at most wire.feedback.MAX_SCORES of them in force."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store.db import Alert, Feedback, FlaggedRecord, SuppressedAlert, utcnow
from wire.feedback import MAX_ACTIONS, MAX_SCORES, model_key
from wire.feedback import Feedback as FeedbackMessage

#: records one action sends to its device at most
ENTRIES_PER_ACTION = 512
TARGETS = ("alert", "record", "incident")


class NotFoundError(LookupError):
    """No such alert, record, incident or feedback."""


class ConflictError(ValueError):
    """The target is marked already, or its device holds as much feedback as it may."""


def _alert(session: Session, alert_id: str) -> Alert | SuppressedAlert | None:
    return session.get(Alert, alert_id) or session.get(SuppressedAlert, alert_id)


def _entries(session: Session, target: str, target_id: str) -> tuple[str, list[list[Any]]]:
    """(device, [job, version, score] of every record the target stands for); NotFoundError."""
    if target == "alert":
        a = _alert(session, target_id)
        if a is None:
            raise NotFoundError(f"no alert {target_id!r}")
        recs = session.scalars(select(FlaggedRecord).where(FlaggedRecord.alert_id == a.id))
        return a.device_id, [[a.job_id, a.model_version, a.score]] + [[a.job_id, a.model_version, r.score]
                                                                       for r in recs]
    if target == "record":
        r = session.get(FlaggedRecord, target_id)
        a = _alert(session, r.alert_id) if r is not None else None
        if r is None or a is None:
            raise NotFoundError(f"no flagged record {target_id!r}")
        return r.device_id, [[a.job_id, a.model_version, r.score]]
    alerts = list(session.scalars(select(Alert).where(Alert.incident_id == target_id)))
    if not alerts:
        raise NotFoundError(f"no incident {target_id!r}")
    model = {a.id: (a.job_id, a.model_version) for a in alerts}
    scored = session.execute(select(FlaggedRecord.alert_id, FlaggedRecord.score)
                             .where(FlaggedRecord.incident_id == target_id))
    return alerts[0].device_id, ([[a.job_id, a.model_version, a.score] for a in alerts]
                                 + [[*model[i], s] for i, s in scored if i in model])


def create(session: Session, target: str, target_id: str, reason: str, by: str) -> Feedback:
    """Mark the target a false positive. ValueError names a bad field; NotFoundError, ConflictError."""
    if target not in TARGETS:
        raise ValueError(f"target: one of {', '.join(TARGETS)}")
    if not (reason and reason.strip() and len(reason) <= 500):
        raise ValueError("reason: say why it is a false positive (at most 500 characters)")
    device, found = _entries(session, target, target_id)
    same = session.scalar(select(Feedback.id).where(Feedback.target == target, Feedback.target_id == target_id,
                                                    Feedback.removed.is_(None)))
    if same:
        raise ConflictError(f"{target} {target_id} is marked already (feedback {same})")
    unique = sorted({(str(j), int(v), float(s)) for j, v, s in found}, key=lambda e: -e[2])
    entries = [list(e) for e in unique[:ENTRIES_PER_ACTION]]
    held = [f.entries for f in _active(session, device)]
    if len(held) + 1 > MAX_ACTIONS or sum(map(len, held)) + len(entries) > MAX_SCORES:
        raise ConflictError(f"device {device} holds {len(held)} actions of {sum(map(len, held))} records: at most "
                       f"{MAX_ACTIONS} and {MAX_SCORES}; undo older feedback first")
    fb = Feedback(id=uuid.uuid4().hex, device_id=device, target=target, target_id=target_id, reason=reason.strip(),
                  created=utcnow(), created_by=by[:64], records=len(unique), entries=entries, published=False)
    session.add(fb)
    session.flush()
    return fb


def remove(session: Session, feedback_id: str, by: str) -> Feedback | None:
    """Undo an action (recorded with who and when); its device is sent the list without it. None: no such action."""
    fb = session.get(Feedback, feedback_id)
    if fb is not None and fb.removed is None:
        fb.removed, fb.removed_by = utcnow(), by[:64]
        session.execute(update(Feedback).where(Feedback.device_id == fb.device_id).values(published=False))
    return fb


def _active(session: Session, device: str) -> list[Feedback]:
    return list(session.scalars(select(Feedback).where(Feedback.device_id == device, Feedback.removed.is_(None))
                                .order_by(Feedback.created, Feedback.id)))


def unpublished(session: Session) -> list[str]:
    """Devices whose feedback changed since it was last sent."""
    return list(session.scalars(select(Feedback.device_id).where(Feedback.published.is_(False)).distinct()))


def device_feedback(session: Session, device: str) -> FeedbackMessage:
    """The device's feedback in force as the message it is sent (marks its rows sent)."""
    rows = _active(session, device)
    models: dict[str, int] = {}
    scores, action, model = [], [], []
    for k, fb in enumerate(rows):
        for job, version, score in fb.entries:
            scores.append(score)
            action.append(k)
            model.append(models.setdefault(model_key(job, version), len(models)))
    session.execute(update(Feedback).where(Feedback.device_id == device).values(published=True))
    return FeedbackMessage(actions=[f.id for f in rows], models=list(models), scores=np.asarray(scores, float),
                           action=np.asarray(action, np.int32), model=np.asarray(model, np.int32))


def record_effect(session: Session, device: str, report: dict[str, Any]) -> int:
    """A device's report (wire.feedback.read_report) onto its own actions; how many were updated."""
    now = utcnow().isoformat()
    n = 0
    for fb in session.scalars(select(Feedback).where(Feedback.device_id == device,
                                                     Feedback.id.in_(list(report["actions"])))):
        fb.effect = {**report["actions"][fb.id], "model": report["model"], "training": report["training"],
                     "reported": now}
        n += 1
    return n

