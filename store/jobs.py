"""Creating, listing and cancelling jobs: the one place a job row is written, for the API, the command line and
the demo."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from models.jobspec import JobSpec
from store.db import Job, ModelVersion, Round
from store.round_record import answers

#: jobs waiting for a coordinator at most: a script creating jobs in a loop cannot queue work without bound
MAX_PENDING_JOBS = 100


class JobExistsError(ValueError):
    pass


class JobLimitError(ValueError):
    pass


def create_job(sessions: sessionmaker, job_id: str, spec: JobSpec, max_pending: int = MAX_PENDING_JOBS) -> Job:
    """Store a validated job as pending (a coordinator picks it up); JobExistsError if the id is taken,
    JobLimitError if `max_pending` jobs wait already."""
    params = spec.to_dict()
    algorithm = params.pop("algorithm")
    with sessions.begin() as s:
        if s.get(Job, job_id) is not None:
            raise JobExistsError(f"job {job_id!r} exists already")
        pending = s.scalar(select(func.count()).select_from(Job).where(Job.status == "pending")) or 0
        if pending >= max_pending:
            raise JobLimitError(f"{pending} jobs wait for a coordinator already (at most {max_pending}): cancel some "
                                "(fedsentry job cancel, POST /api/v1/jobs/{id}/cancel) or wait for them to start")
        job = Job(id=job_id, type=spec.family, algorithm=algorithm, params=params, status="pending")
        s.add(job)
    return job


class JobNotFoundError(LookupError):
    pass


class JobStateError(ValueError):
    pass


def list_jobs(session: Session, status: str | None = None, since: datetime | None = None,
              until: datetime | None = None, limit: int | None = None) -> list[Job]:
    """Jobs newest first; `since`/`until` (naive UTC, as stored) bound the creation time, `until` excluded."""
    q = select(Job).order_by(Job.created.desc(), Job.id.desc())
    if status:
        q = q.where(Job.status == status)
    if since:
        q = q.where(Job.created >= since)
    if until:
        q = q.where(Job.created < until)
    return list(session.scalars(q.limit(limit)))


def get_job(session: Session, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise JobNotFoundError(f"no job {job_id!r}")
    return job


def job_rounds(session: Session, job_id: str) -> list[Round]:
    return list(session.scalars(select(Round).where(Round.job_id == job_id).order_by(Round.round)))


def privacy_spent(session: Session, job_id: str) -> dict[str, Any] | None:
    """The differential-privacy budget the job's latest model version spent (its `dp`), None without one."""
    info = session.scalars(select(ModelVersion.info).where(ModelVersion.job_id == job_id)
                           .order_by(ModelVersion.version.desc()).limit(1)).first()
    dp = info.get("dp") if isinstance(info, dict) else None
    return dp if isinstance(dp, dict) else None


def cancel_job(session: Session, job_id: str) -> Job:
    """Mark a pending or running job cancelled (its coordinator stops it at its next poll); the caller commits."""
    job = get_job(session, job_id)
    if job.status not in ("pending", "running"):
        raise JobStateError(f"job {job_id!r} is {job.status}; only pending or running jobs can be cancelled")
    job.status, job.phase = "cancelled", "cancelled"
    return job


#: rounds in which a device is refused, capped or kept out before the operator's view flags it
REPEATED = 3
INFLUENCE_KINDS = ("refused", "capped", "kept_out")


def influence(rounds: list[Round]) -> list[dict[str, Any]]:
    """Per device of a job, how often it was refused, capped or kept out of the shared model (from each round's
    metrics), the latest reason of each kind, and whether it is flagged: kept out, refused or capped in at least
    REPEATED rounds and in more than half of the rounds it answered. Devices never affected are left out; the
    most affected come first."""
    seen: dict[str, dict[str, Any]] = {}
    for r in rounds:
        metrics = r.metrics if isinstance(r.metrics, dict) else {}
        for kind, devices in (metrics.get("influence") or {}).items():
            if kind not in INFLUENCE_KINDS or not isinstance(devices, dict):
                continue
            for name, why in devices.items():
                d = seen.setdefault(name, {"device": name, **{k: 0 for k in INFLUENCE_KINDS}, "reasons": {},
                                           "last_round": 0, "rounds": set()})
                d[kind] += 1
                d["rounds"].add(r.round)
                d["reasons"][kind] = why
                d["last_round"] = max(d["last_round"], r.round)
    out = []
    answered = answers(rounds, list(seen))
    for name, d in seen.items():
        times = len(d.pop("rounds"))
        d["rounds_affected"], d["rounds_answered"] = times, answered[name]
        d["flagged"] = bool(times >= REPEATED and times > d["rounds_answered"] / 2)
        out.append(d)
    return sorted(out, key=lambda d: (not d["flagged"], -d["rounds_affected"], d["device"]))
