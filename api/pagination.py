"""Opaque cursors for keyset pagination (stable under inserts, fast on large tables)."""

from __future__ import annotations

import base64
import json
from typing import Any

from fastapi import HTTPException


def encode_cursor(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values, default=str).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, n: int) -> list[Any]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(values, list) or len(values) != n:
            raise ValueError
        return values
    except (ValueError, UnicodeDecodeError):
        raise HTTPException(400, [{"field": "query.cursor", "problem": "not a cursor this API returned"}]) from None
