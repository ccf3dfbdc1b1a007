"""Jobs: create (admin), list, get with per-round metrics, cancel (admin)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from api.deps import admin, caller, get_db
from api.job_body import job_body
from api.pagination import CURSOR, decode_cursor, encode_cursor
from api.schemas import ID_PATTERN, InfluenceOut, JobDetail, JobOut, Page, RoundOut
from store import jobs as store_jobs
from store.db import Job
from store.round_record import answered_count, asked_count

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
JOB_ID = Path(..., pattern=ID_PATTERN)


def _dict(v: object) -> dict:
    return v if isinstance(v, dict) else {}


def job_out(job: Job) -> JobOut:
    return JobOut(id=job.id, type=job.type, algorithm=job.algorithm, status=job.status, phase=job.phase,
                  current_round=job.current_round, params=_dict(job.params), error=job.error, created=job.created,
                  updated=job.updated)


def create_router() -> APIRouter:
    """POST /api/v1/jobs, whose body is generated from the job families registered when the app is built
    (api/job_body.py): a plug-in family registered before gets its body and its OpenAPI schema."""
    creating = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

    def create_job(request: Request, body: Any) -> JobOut:
        """Create a training job; a running coordinator picks it up. The body's fields are the job family's
        settings (`type`, default the recommended detector)."""
        spec = body.spec()
        job_id = body.id or f"{body.type}-{uuid.uuid4().hex[:8]}"
        try:
            job = store_jobs.create_job(request.app.state.sessions, job_id, spec)
        except store_jobs.JobExistsError:
            raise HTTPException(409, [{"field": "body.id", "problem": f"job {job_id!r} exists already"}]) from None
        except store_jobs.JobLimitError as e:
            raise HTTPException(422, [{"field": "body", "problem": str(e)}]) from None
        return job_out(job)

    create_job.__annotations__["body"] = job_body()  # built now, from the registry (not a name to resolve)
    creating.post("", status_code=201, response_model=JobOut, dependencies=[Depends(admin)])(create_job)
    return creating


@router.get("", response_model=Page, dependencies=[Depends(caller)])
def list_jobs(limit: int = Query(50, ge=1, le=500), cursor: str | None = CURSOR,
              status: str | None = Query(None, pattern="^(pending|running|finished|failed|cancelled)$"),
              db: Session = Depends(get_db)) -> Page:
    q = select(Job).order_by(Job.created.desc(), Job.id.desc())
    if status:
        q = q.where(Job.status == status)
    if cursor:
        created, job_id = decode_cursor(cursor, ("ts", "id"))
        q = q.where(tuple_(Job.created, Job.id) < tuple_(created, job_id))
    rows = list(db.scalars(q.limit(limit + 1)))
    nxt = encode_cursor([rows[limit - 1].created.isoformat(), rows[limit - 1].id]) if len(rows) > limit else None
    return Page(items=[job_out(j) for j in rows[:limit]], next_cursor=nxt)


@router.get("/{job_id}", response_model=JobDetail, dependencies=[Depends(caller)])
def get_job(job_id: str = JOB_ID, db: Session = Depends(get_db)) -> JobDetail:
    try:
        job = store_jobs.get_job(db, job_id)
    except store_jobs.JobNotFoundError as e:
        raise HTTPException(404, str(e)) from None
    rounds = store_jobs.job_rounds(db, job_id)
    return JobDetail(**job_out(job).model_dump(), dp=store_jobs.privacy_spent(db, job_id), rounds=[
        RoundOut(round=r.round, phase=r.phase, sampled=asked_count(r), answered=answered_count(r),
                 seconds=r.seconds, metrics=_dict(r.metrics)) for r in rounds])


@router.get("/{job_id}/influence", response_model=list[InfluenceOut], dependencies=[Depends(caller)])
def get_influence(job_id: str = JOB_ID, db: Session = Depends(get_db)) -> list[InfluenceOut]:
    """The devices this job refused, capped or kept out of the shared model, how often and why; `flagged` when
    it happened repeatedly (at least 3 rounds and more than half of those the device answered)."""
    try:
        store_jobs.get_job(db, job_id)
    except store_jobs.JobNotFoundError as e:
        raise HTTPException(404, str(e)) from None
    return [InfluenceOut(**d) for d in store_jobs.influence(store_jobs.job_rounds(db, job_id))]


@router.post("/{job_id}/cancel", response_model=JobOut, dependencies=[Depends(admin)])
def cancel_job(job_id: str = JOB_ID, db: Session = Depends(get_db)) -> JobOut:
    try:
        job = store_jobs.cancel_job(db, job_id)
    except store_jobs.JobNotFoundError as e:
        raise HTTPException(404, str(e)) from None
    except store_jobs.JobStateError as e:
        raise HTTPException(409, str(e)) from None
    db.commit()
    return job_out(job)
