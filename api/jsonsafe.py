"""JSON out of whatever is stored: a NaN or an infinity (from an old row, a diverged round) becomes null
instead of an invalid document or a server error."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.responses import JSONResponse

from wire.flows import finite


def number(value: Any) -> float | None:
    """A stored value as a finite number, else None (text, true/false, NaN and infinities are not numbers)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def dumps(value: Any) -> str:
    """One line of strict JSON (no NaN, no raw newline), as server-sent events need."""
    return json.dumps(finite(value), allow_nan=False, separators=(",", ":"))


class SafeJSONResponse(JSONResponse):
    """The API's responses: strict JSON, non-finite numbers served as null."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        except ValueError:
            return json.dumps(finite(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
