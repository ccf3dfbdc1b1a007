"""An alert as one RFC 5424 syslog message: header, STRUCTURED-DATA with the key fields, the alert's JSON as
MSG; and RFC 6587 octet counting for TCP."""

from __future__ import annotations

import json
import os
import re
import socket
from datetime import datetime
from typing import Any

FACILITIES = {name: i for i, name in enumerate((
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp",
    "ntp", "audit", "alert", "clock", "local0", "local1", "local2", "local3", "local4", "local5", "local6",
    "local7"))}
SEVERITIES = {name: i for i, name in enumerate(
    ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"))}
#: the SD-ID: a private one is NAME@<enterprise number>; 32473 is the number RFC 5612 reserves for examples
SD_ID = "fedsentry@32473"
APP_NAME, MSGID = "fedsentry", "alert"
#: the alert's fields always in STRUCTURED-DATA, in this order (other scalar fields follow)
KEY_FIELDS = ("id", "device_id", "job_id", "model_version", "score", "threshold", "count")
_SD_NAME = re.compile(r'[!-~]{1,32}')  # printable US-ASCII ...
_SD_FORBIDDEN = set('= ]"')  # ... except these


def level(text: str, names: dict[str, int], what: str) -> int:
    """A facility or severity by name (local0, warning) or number; ValueError names the choices."""
    t = text.strip().lower()
    if t.isdigit() and int(t) < len(names):
        return int(t)
    if t in names:
        return names[t]
    raise ValueError(f"unknown syslog {what} {text!r}: one of {', '.join(names)} or 0-{len(names) - 1}")


def hostname() -> str:
    """This machine's name as HOSTNAME allows it (printable US-ASCII, at most 255), else the NILVALUE."""
    name = "".join(c for c in socket.gethostname() if "!" <= c <= "~")[:255]
    return name or "-"


def rfc3339(t: datetime) -> str:
    """A stored (naive UTC) time as RFC 3339 with microseconds and Z."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def escape(value: str) -> str:
    """A PARAM-VALUE: `"`, `\\` and `]` escaped with a backslash (RFC 5424, 6.3.3)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def _sd_params(alert: dict[str, Any]) -> list[tuple[str, str]]:
    """The key fields, then every other scalar field (and the scalars of object-valued fields, such as a
    flow), whose name is a valid SD-NAME."""
    flat: dict[str, Any] = {}
    for k, v in alert.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                flat.setdefault(str(k2), v2)
        elif k != "explanation":
            flat[k] = v
    order = [k for k in KEY_FIELDS if k in flat] + [k for k in flat if k not in KEY_FIELDS]
    out = []
    for k in order:
        v = flat[k]
        if v is None or isinstance(v, (list, dict)) or not _SD_NAME.fullmatch(k) or _SD_FORBIDDEN & set(k):
            continue
        out.append((k, json.dumps(v) if isinstance(v, bool) else str(v)))
    return out


def message(alert: dict[str, Any], ts: datetime, facility: int, severity: int, host: str,
            procid: str | None = None) -> bytes:
    """`<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID [SD] MSG`, MSG the alert as JSON (ASCII: no BOM)."""
    sd = "".join(f' {k}="{escape(v)}"' for k, v in _sd_params(alert))
    header = (f"<{facility * 8 + severity}>1 {rfc3339(ts)} {host} {APP_NAME} {procid or os.getpid()} {MSGID} "
              f"[{SD_ID}{sd}]")
    return (header + " " + json.dumps(alert, separators=(",", ":"), sort_keys=False)).encode("utf-8")


def octet_counted(msg: bytes) -> bytes:
    """RFC 6587, 3.4.1: MSG-LEN SP SYSLOG-MSG."""
    return str(len(msg)).encode() + b" " + msg
