"""Input types and checks shared by the schemas and routes: whatever passes them, the database accepts
(no NUL byte, integers within 64 bits, times in UTC)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import HTTPException
from pydantic import AfterValidator, PlainSerializer, StringConstraints, WithJsonSchema
from pydantic_core import PydanticCustomError

ALERT_ID_PATTERN = r"^[^\x00]{1,64}$"  # alert ids are chosen by agents: older rows may hold any character


def utc_naive(value: datetime | None, field: str) -> datetime | None:
    """The instant as the database stores times (naive UTC): a naive time is taken as UTC already,
    an aware one is converted (so `...+02:00` means two hours earlier in UTC)."""
    if value is None or value.tzinfo is None:
        return value
    try:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    except OverflowError:
        raise HTTPException(422, [{"field": field, "problem": "outside the years 1 to 9999 in UTC"}]) from None


def _text(v: str) -> str:
    # PostgreSQL refuses NUL bytes, and control characters have no business in a name
    if not 1 <= len(v) <= 200 or any(c < " " or c == "\x7f" for c in v):
        raise PydanticCustomError("text", "must be 1 to 200 printable characters (no control characters)")
    return v


def _int64(v: int) -> int:
    if not -(2**63) <= v < 2**63:
        raise PydanticCustomError("int64", "must be an integer within 64 bits (-2^63 to 2^63-1)")
    return v


def _scalar(v: Any) -> Any:
    """An algorithm parameter: a finite number, a 64-bit integer, true/false, printable text or null."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return _int64(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise PydanticCustomError("finite", "must be a finite number")
        return v
    if isinstance(v, str):
        return _text(v)
    raise PydanticCustomError("scalar", "must be a number, true or false, text or null")


def _item_id(v: Any) -> Any:
    """An item id: a 64-bit integer or printable text."""
    if isinstance(v, int) and not isinstance(v, bool):
        return _int64(v)
    if isinstance(v, str):
        return _text(v)
    raise PydanticCustomError("item_id", "must be an integer or text")


def _note(v: str) -> str:
    if any((c < " " and c not in "\n\t") or c == "\x7f" for c in v):
        raise PydanticCustomError("text", "must be printable text (line breaks allowed, no other control characters)")
    return v


def _utc_text(value: datetime) -> str:
    """A stored time (naive UTC) as ISO 8601 with its offset, "Z": a client never has to guess the zone."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    return aware.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


#: a time in an answer: UTC, with its offset ("2026-11-25T18:39:59.646000Z")
UtcTime = Annotated[datetime, PlainSerializer(_utc_text, return_type=str, when_used="json")]
Int64 = Annotated[int, AfterValidator(_int64)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(_text)]
Note = Annotated[str, StringConstraints(max_length=500), AfterValidator(_note)]
Scalar = Annotated[Any, AfterValidator(_scalar), WithJsonSchema(
    {"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "string", "maxLength": 200}, {"type": "null"}]})]
ItemId = Annotated[Any, AfterValidator(_item_id), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}, {"type": "string", "maxLength": 200}]})]


def field_problem(e: ValueError, where: str = "body") -> HTTPException:
    """A store module's ValueError ("field: problem") as the 422 naming that field."""
    field, _, problem = str(e).partition(": ")
    return HTTPException(422, [{"field": f"{where}.{field}", "problem": problem or str(e)}])


def found(row: Any, missing: str) -> Any:
    """The row, or 404 saying what is missing."""
    if row is None:
        raise HTTPException(404, missing)
    return row
