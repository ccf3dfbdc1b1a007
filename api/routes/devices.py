"""Devices: presence, last seen, rounds taken part in, alert counts."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import caller, get_db
from api.pagination import CURSOR, decode_cursor, encode_cursor
from api.schemas import DeviceOut, Page
from store.db import Device

router = APIRouter(prefix="/api/v1/devices", tags=["devices"])


@router.get("", response_model=Page, dependencies=[Depends(caller)])
def list_devices(online: bool | None = None, limit: int = Query(100, ge=1, le=500), cursor: str | None = CURSOR,
                 db: Session = Depends(get_db)) -> Page:
    q = select(Device).order_by(Device.id)
    if online is not None:
        q = q.where(Device.online.is_(online))
    if cursor:
        (after,) = decode_cursor(cursor, ("id",))
        q = q.where(Device.id > after)
    rows = list(db.scalars(q.limit(limit + 1)))
    nxt = encode_cursor([rows[limit - 1].id]) if len(rows) > limit else None
    return Page(items=[DeviceOut.model_validate(d, from_attributes=True) for d in rows[:limit]], next_cursor=nxt)
