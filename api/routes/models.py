"""Model versions of a job (metadata; the matrix on request) and promotion (admin)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import admin, caller, get_db
from api.schemas import ID_PATTERN, ModelOut
from coordinator.models_service import promote
from store.db import Job, ModelVersion, unpack

router = APIRouter(tags=["models"])


def model_out(mv: ModelVersion, matrix: bool = False) -> ModelOut:
    """A model version as the API shows it: what its family stored, the arrays on request."""
    arrays = {k: v.tolist() for k, v in unpack(mv.arrays).items()} if matrix else None
    return ModelOut(id=mv.id, job_id=mv.job_id, version=mv.version, type=mv.type, round=mv.round,
                    promoted=mv.promoted, published=mv.published, created=mv.created, info=dict(mv.info),
                    features=mv.info.get("features"), threshold=mv.info.get("threshold"), arrays=arrays,
                    Z=arrays.get("Z") if arrays else None)


@router.get("/api/v1/jobs/{job_id}/models", response_model=list[ModelOut], dependencies=[Depends(caller)])
def job_models(job_id: str = Path(..., pattern=ID_PATTERN), db: Session = Depends(get_db)) -> list[ModelOut]:
    if db.get(Job, job_id) is None:
        raise HTTPException(404, f"no job {job_id!r}")
    rows = db.scalars(select(ModelVersion).where(ModelVersion.job_id == job_id).order_by(ModelVersion.version))
    return [model_out(m) for m in rows]


@router.get("/api/v1/models/{model_id}", response_model=ModelOut, dependencies=[Depends(caller)])
def get_model(model_id: int = Path(..., ge=1, le=2**31 - 1), matrix: bool = False,
              db: Session = Depends(get_db)) -> ModelOut:
    mv = db.get(ModelVersion, model_id)
    if mv is None:
        raise HTTPException(404, f"no model version {model_id}")
    return model_out(mv, matrix)


@router.post("/api/v1/models/{model_id}/promote", response_model=ModelOut, dependencies=[Depends(admin)])
def promote_model(request: Request, model_id: int = Path(..., ge=1, le=2**31 - 1),
                  db: Session = Depends(get_db)) -> ModelOut:
    """Make this version the one agents score with; the coordinator publishes it to every agent."""
    try:
        promote(request.app.state.sessions, model_id)
    except KeyError:
        raise HTTPException(404, f"no model version {model_id}") from None
    mv = db.get(ModelVersion, model_id)
    if mv is None:  # deleted since promote() found it
        raise HTTPException(404, f"no model version {model_id}")
    return model_out(mv)

