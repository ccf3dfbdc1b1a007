"""Recommendations for a new user, folded in from the ratings sent with the request (nothing stored).

Known users' factors live on their devices, so their recommendations are computed there; the server
can only serve users it has never seen, from the promoted recommendation model's item factors."""

from __future__ import annotations

import re
import time

import numpy as np
from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import caller, get_db
from api.schemas import RecommendRequest
from models.families import families_with
from models.recsys.recommend import ItemModel, fold_in
from store.db import ModelVersion, unpack

router = APIRouter(prefix="/api/v1/recommendations", tags=["recommendations"])
_INT = re.compile(r"-?[0-9]{1,19}")  # ASCII digits only ("²".isdigit() is true), at most 64 bits below


def _item_key(key: str, integer_ids: bool) -> int | str:
    """A rating's item id as the catalogue holds it: an integer (of 64 bits) where the ids are integers."""
    if not integer_ids:
        return key
    if _INT.fullmatch(key) and -(2**63) <= int(key) < 2**63:
        return int(key)
    raise HTTPException(422, [{"field": "body.ratings", "problem": f"unknown item id {key[:40]!r}: catalogue ids "
                                                                   "are 64-bit integers"}])


class Recommended(BaseModel):
    item: str | int
    predicted_rating: float


class RecommendResponse(BaseModel):
    model_id: int
    job_id: str
    items: list[Recommended]
    seconds: float


def _item_model(mv: ModelVersion) -> ItemModel:
    ids = mv.info["items"]
    item_ids = np.array(ids) if ids and all(isinstance(i, int) for i in ids) else np.array([str(i) for i in ids])
    return ItemModel(item_ids, unpack(mv.arrays)["item_factors"], float(mv.info["mean"]),
                     float(mv.info["rating_min"]), float(mv.info["rating_max"]), float(mv.info["lam"]))


@router.post("", response_model=RecommendResponse, dependencies=[Depends(caller)])
def recommend(body: RecommendRequest, db: Session = Depends(get_db)) -> RecommendResponse:
    """Top-N items for a new user from `ratings` ({item id: rating}); the rated items are left out."""
    recommenders = families_with("ratings")
    mv = db.scalars(select(ModelVersion).where(ModelVersion.type.in_(recommenders), ModelVersion.promoted.is_(True))
                    .order_by(ModelVersion.created.desc())).first()
    if mv is None:
        raise HTTPException(409, f"no recommendation model yet: finish a {' or '.join(recommenders)} job first")
    model = _item_model(mv)
    keys = list(body.ratings)
    ids = [_item_key(k, model.item_ids.dtype.kind in "iu") for k in keys]
    t0 = time.perf_counter()
    try:
        found = fold_in(model, ids, [body.ratings[k] for k in keys], body.n)
    except ValueError as e:
        raise HTTPException(422, [{"field": "body.ratings", "problem": str(e)}]) from None
    return RecommendResponse(model_id=mv.id, job_id=mv.job_id, seconds=time.perf_counter() - t0,
                             items=[Recommended(**x) for x in found.as_list()])
