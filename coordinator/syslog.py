"""An alert as one RFC 5424 syslog message: header, STRUCTURED-DATA (syslog_sd), the alert's JSON as MSG, within a
size (syslog_fit); and RFC 6587 octet counting for TCP."""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime
from typing import Any

from coordinator import syslog_fit, syslog_sd

FACILITIES = {name: i for i, name in enumerate((
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp",
    "ntp", "audit", "alert", "clock", "local0", "local1", "local2", "local3", "local4", "local5", "local6",
    "local7"))}
SEVERITIES = {name: i for i, name in enumerate(
    ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"))}
APP_NAME, MSGID = "fedsentry", "alert"
#: message sizes by default: UDP, what RFC 5426 (3.2) says every receiver SHOULD take (2048); TCP, what RFC 5425
#: (4.3.1) says a receiver over a stream SHOULD take (8192; rsyslog's default maxMessageSize too)
UDP_SIZE, TCP_SIZE = 2048, 8192
#: the largest sizes allowed: a UDP payload (65535 less the UDP header: IPv6's; IPv4's is 65507, a larger
#: datagram to an IPv4 address is refused by the system), and 1 MiB over TCP
UDP_MAX, TCP_MAX = 65527, 1 << 20


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


def message(alert: dict[str, Any], ts: datetime, facility: int, severity: int, host: str,
            procid: str | None = None, limit: int = UDP_SIZE) -> bytes:
    """`<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID [SD] MSG`, MSG the alert as JSON (ASCII: no BOM), in at
    most `limit` bytes (syslog_fit says what is cut first)."""
    head = f"<{facility * 8 + severity}>1 {rfc3339(ts)} {host} {APP_NAME} {procid or os.getpid()} {MSGID}"
    return syslog_fit.fit(head, syslog_sd.elements(alert), json.dumps(alert, separators=(",", ":")), limit)


def octet_counted(msg: bytes) -> bytes:
    """RFC 6587, 3.4.1: MSG-LEN SP SYSLOG-MSG."""
    return str(len(msg)).encode() + b" " + msg
