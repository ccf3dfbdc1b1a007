"""Model versions: agents score with the last *promoted* model, never with a half-trained Z.

Promoting is a database change (the API may do it); the coordinator publishes promoted versions that are
not yet published, retained, on the model topic, so every agent (and any that joins later) gets them."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models.families import FAMILIES, family
from store.db import ModelVersion
from wire.protocol import model_topic


def slot_types(job_type: str) -> list[str]:
    """The job types whose models replace each other's (pca and gmm: the anomaly model agents score with)."""
    slot = family(job_type).slot
    return [name for name, f in FAMILIES.items() if f.slot == slot]


def promote(sessions: sessionmaker[Session], model_id: int) -> ModelVersion:
    """Mark one version promoted (the only one of its slot); the coordinator then publishes it."""
    with sessions.begin() as s:
        mv = s.get(ModelVersion, model_id)
        if mv is None:
            raise KeyError(f"no model version {model_id}")
        s.query(ModelVersion).filter(ModelVersion.type.in_(slot_types(mv.type)), ModelVersion.id != mv.id).update(
            {"promoted": False}, synchronize_session=False)
        mv.promoted, mv.published = True, False
    return mv


def publish_promoted(sessions: sessionmaker[Session], publish: Callable[[str, bytes, bool], None],
                     again: bool = False) -> int:
    """Publish promoted versions that are not published yet (`again`: all of them, as a clustered broker keeps a
    retained message on one node only, and agents skip a version they have); returns how many were sent."""
    with sessions.begin() as s:
        which = ModelVersion.promoted.is_(True) if again else (ModelVersion.promoted.is_(True)
                                                               & ModelVersion.published.is_(False))
        pending = list(s.scalars(select(ModelVersion).where(which)))
        for mv in pending:
            payload = family(mv.type).load_runner().model_payload(mv)
            if payload is not None:  # agents use it (pca, gmm); others are served by the API (recsys)
                publish(model_topic(family(mv.type).slot), payload, True)
            mv.published = True
    return len(pending)
