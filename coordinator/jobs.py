"""Creating a job: the one place a job row is written, for the API, the command line and the demo."""

from __future__ import annotations

from sqlalchemy.orm import sessionmaker

from coordinator.db import Job
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
