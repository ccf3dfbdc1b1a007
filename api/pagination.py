"""Opaque cursors for keyset pagination (stable under inserts, fast on large tables).

A cursor is base64 of a JSON list of strings; a decoded cursor is checked value by value (an id the
database can hold, a time it can compare), so a forged one is a 400, never a query that fails."""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Any, Literal

from fastapi import HTTPException, Query

from api.validation import utc_naive

MAX_CURSOR = 512
CURSOR = Query(None, max_length=MAX_CURSOR, description="`next_cursor` of the previous page")
_ID = re.compile(r"[^\x00]{1,64}")
Kind = Literal["ts", "id"]


def encode_cursor(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values, default=str).encode()).decode().rstrip("=")


def _bad() -> HTTPException:
    return HTTPException(400, [{"field": "query.cursor", "problem": "not a cursor this API returned"}])


def _value(v: Any, kind: Kind) -> Any:
    if not isinstance(v, str):
        raise _bad()
    if kind == "id":
        if not _ID.fullmatch(v):
            raise _bad()
        return v
    try:
        return utc_naive(datetime.fromisoformat(v), "query.cursor")
    except ValueError:
        raise _bad() from None


def decode_cursor(cursor: str, kinds: tuple[Kind, ...]) -> list[Any]:
    """The cursor's values, one per kind: 'ts' a time (naive UTC), 'id' a stored id."""
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, UnicodeDecodeError, binascii.Error, RecursionError):
        raise _bad() from None
    if not isinstance(values, list) or len(values) != len(kinds):
        raise _bad()
    return [_value(v, k) for v, k in zip(values, kinds)]
