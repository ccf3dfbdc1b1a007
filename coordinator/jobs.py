"""Creating, listing and cancelling jobs: the one place a job row is written, for the API, the command line and
the demo."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from coordinator.db import Job, Round
from models.jobspec import JobSpec


class JobExistsError(ValueError):
    pass


def create_job(sessions: sessionmaker, job_id: str, spec: JobSpec) -> Job:
    """Store a validated job as pending (a coordinator picks it up); JobExistsError if the id is taken."""
    params = spec.to_dict()
    algorithm = params.pop("algorithm")
    with sessions.begin() as s:
        if s.get(Job, job_id) is not None:
            raise JobExistsError(f"job {job_id!r} exists already")
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


def cancel_job(session: Session, job_id: str) -> Job:
    """Mark a pending or running job cancelled (its coordinator stops it at its next poll); the caller commits."""
    job = get_job(session, job_id)
    if job.status not in ("pending", "running"):
        raise JobStateError(f"job {job_id!r} is {job.status}; only pending or running jobs can be cancelled")
    job.status, job.phase = "cancelled", "cancelled"
    return job
