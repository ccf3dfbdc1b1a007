"""Devices' status messages stored: presence, model status and what each device can do, in `devices`.

What a device says it can do (the job types it takes part in, wire.protocol.ABILITIES, the numeric features its
records have) is a column of its row, `capabilities`, not a coordinator's memory: any coordinator that leads a job
(a standby taking over, a driver that never heard the device's status because it arrived at another node or
another process) reads it there (`online_devices`, `announced`). The MQTT coordinator and the ingest workers on a
broker cluster (coordinator.queue_ingest) store statuses through the same `StatusStore`; a status is written only
when it changes what is stored, or every REFRESH seconds for last_seen."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from coordinator.feedback import Reports
from models.families import LEGACY_JOBS
from store.db import Device, utcnow
from store.records import insert_for
from wire.messages import Envelope
from wire.protocol import ABILITIES

#: how often an unchanged status still refreshes the device's last_seen (seconds)
REFRESH = 60.0

MODEL_STATES = ("none", "loaded", "scoring", "refused")
#: most job types, abilities and features one status may declare (more are ignored or refused)
MAX_JOBS, MAX_ABILITIES, MAX_FEATURES, MAX_FEATURE_NAME = 64, 16, 1000, 128


def model_status(m: Any) -> dict[str, Any] | None:
    """A device's report on its model (the one in use, and the last it refused with why), kept only when well
    formed: a status message is never refused for it."""
    if not isinstance(m, dict) or m.get("status") not in MODEL_STATES:
        return None
    job, version, reason = m.get("job"), m.get("version"), m.get("reason", "")
    if not (isinstance(job, str) and len(job) <= 64 and isinstance(version, int) and not isinstance(version, bool)
            and 0 <= version < 2**31 and isinstance(reason, str)):
        return None
    out = {"job": job, "version": version, "status": m["status"], **({"reason": reason[:300]} if reason else {})}
    refused = model_status(m.get("refused")) if "refused" in m else None
    return {**out, "refused": refused} if refused else out


def capabilities(meta: dict[str, Any]) -> dict[str, list[str]]:
    """What an online device's status declares it can do, as stored: `jobs` (absent for an agent that names none:
    it takes part in models.families.LEGACY_JOBS), `abilities` (those of wire.protocol.ABILITIES; none for an
    agent that names none, an older program), `features` (when every name is printable and not too long, and
    there are not too many; otherwise none)."""
    out: dict[str, list[str]] = {}
    jobs = meta.get("jobs")
    if isinstance(jobs, list):
        out["jobs"] = [str(j)[:32] for j in jobs[:MAX_JOBS]]
    abilities = meta.get("abilities")
    out["abilities"] = sorted({a for a in abilities[:MAX_ABILITIES] if a in ABILITIES}) \
        if isinstance(abilities, list) else []
    features = meta.get("features")
    if isinstance(features, list) and len(features) <= MAX_FEATURES and all(
            isinstance(f, str) and 0 < len(f) <= MAX_FEATURE_NAME and f.isprintable() for f in features):
        out["features"] = list(features)
    return out


@dataclass(frozen=True)
class Capable:
    """One online device's stored capabilities, read back."""

    jobs: tuple[str, ...]
    abilities: frozenset[str]
    features: tuple[str, ...]

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> Capable:
        stored = stored or {}
        return cls(tuple(stored.get("jobs", LEGACY_JOBS)), frozenset(stored.get("abilities", ())),
                   tuple(stored.get("features", ())))


def online(sessions: sessionmaker[Session]) -> dict[str, Capable]:
    """Every device online now, with what it declared it can do."""
    with sessions() as s:
        rows = s.execute(select(Device.id, Device.capabilities).where(Device.online.is_(True))).all()
    return {d: Capable.of(c) for d, c in rows}


def able(fleet: dict[str, Capable], job_type: str, needs: frozenset[str] = frozenset()) -> list[str]:
    """The devices of `fleet` that take part in jobs of `job_type` and have the abilities it needs."""
    return [d for d, c in fleet.items() if job_type in c.jobs and needs <= c.abilities]


class StatusStore:
    """Writes devices' statuses (one upsert each: coordinators sharing a database may see a new device at once) and
    the feedback effects they report. It remembers what it wrote for each device, so that a status is written only
    when it changes what is stored (`changed`), whichever connection it came on."""

    def __init__(self, sessions: sessionmaker[Session]):
        self.sessions = sessions
        self.reports = Reports(sessions)
        self.written: dict[str, tuple[Any, float]] = {}  # device -> what was last written, and when

    def take(self, agent: str, env: Envelope) -> None:
        """One status message of `agent` (its kind already checked)."""
        meta = env.meta
        is_online = bool(meta.get("online"))
        self.write(agent, is_online, model_status(meta.get("model")), capabilities(meta) if is_online else None)
        if "feedback" in meta:
            self.reports.take(agent, meta["feedback"])

    def write(self, agent: str, is_online: bool, model: dict[str, Any] | None = None,
              able: dict[str, list[str]] | None = None) -> None:
        """Presence, model status and capabilities, written when they change (and last_seen at most every
        REFRESH s). An online status replaces the stored capabilities whole (a device whose program
        changed may no longer have an ability); an offline one (`able` None: the broker's will) keeps them."""
        state = (is_online, model, able)
        if not self.changed(agent, state):
            return
        values: dict[str, Any] = {"online": is_online, "last_seen": utcnow(),
                                  **({"model_status": model} if model is not None else {}),
                                  **({"capabilities": able} if able is not None else {})}
        with self.sessions.begin() as s:
            insert = insert_for(s)
            s.execute(insert(Device).values(id=agent, **values).on_conflict_do_update(index_elements=["id"],
                                                                                      set_=values))
        self.written[agent] = (state, time.monotonic())

    def changed(self, device: str, state: Any) -> bool:
        """Whether a status with this stored state must be written: it differs from the last one written, or
        that one is REFRESH seconds old (last_seen)."""
        last = self.written.get(device)
        return last is None or last[0] != state or time.monotonic() - last[1] >= REFRESH
