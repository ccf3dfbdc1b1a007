"""An alert's flow fields (its record's connection: Zeek's uid, addresses, ports, ...) as both sides keep them.

The traffic an agent scores is chosen by attackers, so no content of a flow field may cost a flagged record its
alert: a field is kept escaped and bounded, or dropped alone and counted, and the alert always goes on. The agent
applies the rule before it sends; the coordinator applies it again to what arrives (an older or hostile agent).

- at most MAX_FIELDS fields (the first ones kept);
- a name is text: characters that are not printable are written as \\uXXXX, and it is cut to MAX_NAME characters
  (a name left empty, or the same as one already kept, drops its field);
- a value is a whole number within 2^53, or text escaped the same way and cut to MAX_TEXT characters, ending in
  "…" when cut (never inside an escape); anything else (an object, a list, true/false, a fraction, a larger
  number) drops its field.
"""

from __future__ import annotations

import math
from typing import Any

MAX_FIELDS, MAX_NAME, MAX_TEXT = 16, 32, 256
CUT = "…"


def ip_text(value: Any) -> str | None:
    """An IP address in its one canonical text (IPv6 compressed, lower case), or None for anything that is not one:
    how addresses are stored, searched and forwarded, however a device wrote them. (The coordinator's: imported
    here when first used, so an agent, which imports this module for the flow-field rule, never loads it.)"""
    import ipaddress

    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


def visible(ch: str) -> str:
    """One character as agent-supplied text is kept and forwarded: itself if printable, else the visible text
    \\uXXXX (\\UXXXXXXXX beyond the BMP): no control, format or separator character reaches a log line."""
    return ch if ch.isprintable() else (f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")


def escaped(text: str, limit: int) -> str:
    """`text` with each character `visible`, at most `limit` characters, cut between escapes and ending in CUT
    when cut."""
    out, size = [], 0
    for ch in text:
        e = visible(ch)
        if size + len(e) > limit:
            break
        out.append(e)
        size += len(e)
    else:
        return "".join(out)
    while out and size + len(CUT) > limit:
        size -= len(out.pop())
    return "".join(out) + CUT


def clean_flow(flow: Any) -> tuple[dict[str, str | int] | None, int]:
    """(the flow fields kept, how many were dropped); a flow that is not an object is dropped whole (counted 1)."""
    if flow is None:
        return None, 0
    if not isinstance(flow, dict):
        return None, 1
    kept: dict[str, str | int] = {}
    dropped = 0
    for k, v in flow.items():
        name = escaped(k, MAX_NAME) if isinstance(k, str) else ""
        if len(kept) >= MAX_FIELDS or not name or name in kept:
            dropped += 1
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53:
            kept[name] = v
        elif isinstance(v, str):
            kept[name] = escaped(v, MAX_TEXT)
        else:
            dropped += 1
    return kept, dropped


def finite(value: Any) -> Any:
    """The value with every non-finite float, however deeply nested, replaced by None (JSON has no infinity):
    what the coordinator stores of an agent's explanation and what the API serves."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
