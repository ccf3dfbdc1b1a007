"""STRUCTURED-DATA of an alert (RFC 5424, 6.3): which parameters, under which SD-ID, with which names, and how
their values are written.

The coordinator's own fields are in `fedsentry@32473`; an incident update's in `incident@32473`; the flow
fields an agent chose, names and values alike, only in `flow@32473`, so that no agent key sits beside or
shadows the coordinator's (a flow key `score` or `id` is `score` of the flow element). An agent's key
becomes an SD-NAME in the alphabet [A-Za-z0-9_.-], at most 32 characters: a key already in it is kept,
any other is cut to 25 characters with its other characters as `_`, followed by `_` and 6 hex digits of
its SHA-256; a name still taken gets `~1`, `~2`, ... (`~` is in no other name)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from wire.flows import visible

#: a private SD-ID is NAME@<enterprise number>; 32473 is the number RFC 5612 reserves for examples
SD_ID, INCIDENT_ID, FLOW_ID = "fedsentry@32473", "incident@32473", "flow@32473"
#: the alert's fields first in its element, in this order (its other scalar fields follow)
KEY_FIELDS = ("id", "device_id", "job_id", "model_version", "score", "threshold", "count")
INCIDENT_FIELDS = ("key", "window", "first", "last")
_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "]": "\\]"}


@dataclass(frozen=True)
class Param:
    """An SD-PARAM; `cut`: its value is an agent's text, which may be shortened to fit a message (numbers and
    the coordinator's own values never are)."""

    name: str
    value: str
    cut: bool = False


Element = tuple[str, list[Param]]


def char(c: str) -> str:
    """One character of a PARAM-VALUE as written: `"`, `\\` and `]` escaped with a backslash (6.3.3); a
    character that is not printable (control, format, separator, surrogate, private or unassigned) as the
    visible text `\\uXXXX` (`\\UXXXXXXXX` beyond the BMP), so that none reaches a receiver's log line."""
    return _ESCAPES.get(c) or visible(c)


def escape(value: str) -> str:
    """A PARAM-VALUE as written (char, for each character)."""
    return "".join(map(char, value))


def sd_names(keys: list[str]) -> dict[str, str]:
    """A distinct SD-NAME for each agent key (the module's rule)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for key in keys:
        name = key if _SAFE.fullmatch(key) else (
            _UNSAFE.sub("_", key[:25]) + "_" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:6])
        base, n = name, 0
        while name in taken:
            n += 1
            name = f"{base[:31 - len(str(n))]}~{n}"
        taken.add(name)
        out[key] = name
    return out


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def elements(alert: dict[str, Any]) -> list[Element]:
    """The alert's SD-ELEMENTs: its scalar fields (key fields first), its incident, its flow."""
    scalars = {k: v for k, v in alert.items() if v is not None and not isinstance(v, (list, dict))}
    order = [k for k in KEY_FIELDS if k in scalars] + [k for k in scalars if k not in KEY_FIELDS]
    out: list[Element] = [(SD_ID, [Param(k, _text(scalars[k])) for k in order])]
    incident = alert.get("incident")
    if isinstance(incident, dict):
        params = [Param(k, _text(incident[k]), cut=k == "key") for k in INCIDENT_FIELDS
                  if incident.get(k) is not None]
        if isinstance(incident.get("samples"), list):
            params.append(Param("samples", str(len(incident["samples"]))))
        out.append((INCIDENT_ID, params))
    flow = alert.get("flow")
    if isinstance(flow, dict):
        names = sd_names([str(k) for k in flow])
        out.append((FLOW_ID, [Param(names[str(k)], _text(v), cut=not isinstance(v, (int, float)))
                              for k, v in flow.items() if v is not None]))
    return out
