"""A syslog server as a forwarding destination: RFC 5424 messages (coordinator/syslog.py) over UDP, one
datagram each, or TCP, octet-counted, each within the destination's size."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from coordinator import syslog, syslog_fit
from coordinator.forward import TIMEOUT, DeliveryError, RefusedError
from store.db import Alert

#: what the system refuses for the message itself (never retried): a datagram too long
REFUSED_ERRNO = frozenset({errno.EMSGSIZE})


@dataclass
class Syslog:
    """RFC 5424 messages to udp://host[:514] (one datagram each) or tcp://host[:514] (octet-counted), each of
    at most `?max_size=` bytes (default syslog.UDP_SIZE, syslog.TCP_SIZE)."""

    url: str
    facility: int = syslog.FACILITIES["local0"]
    severity: int = syslog.SEVERITIES["warning"]

    def __post_init__(self) -> None:
        u = urlsplit(self.url)
        if u.scheme not in ("udp", "tcp") or not u.hostname or u.path not in ("", "/"):
            raise ValueError(f"{self.url!r}: expected udp://host:port or tcp://host:port")
        try:
            self._addr = (u.hostname, u.port or 514)
        except ValueError as e:
            raise ValueError(f"{self.url!r}: {e}") from None
        self._tcp = u.scheme == "tcp"
        self.max_size = _max_size(self.url, u.query, self._tcp)
        self.key = f"syslog {u.scheme}://{u.hostname}:{self._addr[1]}"  # the same whatever the size
        self.label = self.key
        self._sock: socket.socket | None = None
        self._host = syslog.hostname()

    def send(self, alert: dict[str, Any], row: Alert) -> None:
        try:
            msg = syslog.message(alert, row.ts, self.facility, self.severity, self._host, limit=self.max_size)
        except ValueError as e:  # cannot be made to fit (a size of at least 480 always holds the header and id)
            raise RefusedError(str(e)) from None
        try:
            if self._sock is None:
                if self._tcp:
                    self._sock = socket.create_connection(self._addr, timeout=TIMEOUT)
                else:
                    family = socket.getaddrinfo(*self._addr, type=socket.SOCK_DGRAM)[0][0]
                    self._sock = socket.socket(family, socket.SOCK_DGRAM)
                    self._sock.settimeout(TIMEOUT)
            if self._tcp:
                self._sock.sendall(syslog.octet_counted(msg))
            else:
                self._sock.sendto(msg, self._addr)
        except OSError as e:
            self.close()
            error = RefusedError if e.errno in REFUSED_ERRNO else DeliveryError
            raise error(f"{type(e).__name__}: {e} ({len(msg)} bytes)") from None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _max_size(url: str, query: str, tcp: bool) -> int:
    """The `max_size=N` of a syslog URL's query (the only setting there), within its transport's bounds."""
    top, default = (syslog.TCP_MAX, syslog.TCP_SIZE) if tcp else (syslog.UDP_MAX, syslog.UDP_SIZE)
    settings = dict(parse_qsl(query, keep_blank_values=True))
    if set(settings) - {"max_size"}:
        raise ValueError(f"{url!r}: the only setting is ?max_size=BYTES")
    text = settings.get("max_size", str(default))
    if not (text.isascii() and text.isdigit() and syslog_fit.MIN_SIZE <= int(text) <= top):
        raise ValueError(f"{url!r}: max_size must be {syslog_fit.MIN_SIZE}..{top} bytes over "
                         f"{'TCP' if tcp else 'UDP'}")
    return int(text)
