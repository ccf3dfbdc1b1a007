"""Real alert receivers for forwarding tests: an HTTP server (webhook), UDP and TCP syslog servers, and a strict
RFC 5424 parser for what they receive."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# -- receivers ---------------------------------------------------------------------------------------------


class WebhookReceiver:
    """http.server on a free port; answers 500 to the first `failures` requests, then 200, or the status
    `refuse` gives an alert (None: 200)."""

    def __init__(self, failures: int = 0, delay: float = 0.0, refuse: Callable[[dict], int | None] = lambda a: None):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.failures, self.delay, self.refused, self.refuse = failures, delay, 0, refuse
        self.answers: list[tuple[str, int]] = []  # (alert id, status) of every request
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(receiver.delay)
                alert = json.loads(body)
                if receiver.refused < receiver.failures:
                    receiver.refused += 1
                    code = 500
                else:
                    code = receiver.refuse(alert) or 200
                if code == 200:
                    receiver.bodies.append(alert)
                    receiver.headers.append(dict(self.headers))
                receiver.answers.append((alert["id"], code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?src=fedsentry"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def ids(self) -> list[str]:
        return [b["id"] for b in self.bodies]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class SyslogReceiver:
    """A UDP socket (one message a datagram) or a TCP listener (RFC 6587 octet-counted frames)."""

    def __init__(self, proto: str):
        self.messages: list[bytes] = []
        self.proto = proto
        kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
        self.sock = socket.socket(socket.AF_INET, kind)
        self.sock.bind(("127.0.0.1", 0))
        if proto == "udp":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            threading.Thread(target=self._udp, daemon=True).start()
        else:
            self.sock.listen()
            threading.Thread(target=self._accept, daemon=True).start()
        self.url = f"{proto}://127.0.0.1:{self.sock.getsockname()[1]}"

    def _udp(self):
        while True:
            try:
                self.messages.append(self.sock.recv(65536))
            except OSError:
                return

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._frames, args=(conn,), daemon=True).start()

    def _frames(self, conn: socket.socket):
        buf = b""
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while b" " in buf:
                    length, _, rest = buf.partition(b" ")
                    assert re.fullmatch(rb"[1-9][0-9]*", length), f"bad MSG-LEN {length[:20]!r}"
                    if len(rest) < int(length):
                        break
                    self.messages.append(rest[:int(length)])
                    buf = rest[int(length):]

    def ids(self) -> list[str]:
        return [parse_rfc5424(m)["sd"]["fedsentry@32473"]["id"] for m in self.messages]

    def close(self):
        self.sock.close()


# -- a strict RFC 5424 parser -------------------------------------------------------------------------------

_HEADER = re.compile(
    rb"<(?P<pri>[0-9]{1,3})>(?P<version>[1-9][0-9]{0,2}) "
    rb"(?P<ts>-|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})) "
    rb"(?P<host>[!-~]{1,255}) (?P<app>[!-~]{1,48}) (?P<procid>[!-~]{1,128}) (?P<msgid>[!-~]{1,32}) ")
_SD_NAME = rb'[!#-<>-\\^-~]{1,32}'  # PRINTUSASCII except '=', SP, ']', '"'
_PARAM = re.compile(rb' (' + _SD_NAME + rb')="((?:[^"\\\]]|\\["\\\]]|\\(?!["\\\]]))*)"')


def parse_rfc5424(msg: bytes) -> dict:
    """The parts of a SYSLOG-MSG (RFC 5424, section 6); AssertionError where it breaks the grammar."""
    m = _HEADER.match(msg)
    assert m, f"bad header: {msg[:120]!r}"
    pri = int(m["pri"])
    assert 0 <= pri <= 191 and str(pri).encode() == m["pri"], f"bad PRI {m['pri']!r}"
    pos, sd = m.end(), {}
    if msg[pos:pos + 1] == b"-":
        pos += 1
    else:
        while msg[pos:pos + 1] == b"[":
            sid = re.compile(_SD_NAME).match(msg, pos + 1)
            assert sid, "bad SD-ID"
            pos, params = sid.end(), {}
            while (p := _PARAM.match(msg, pos)) is not None:
                value = re.sub(rb'\\(["\\\]])', rb"\1", p[2]).decode("utf-8")
                params[p[1].decode()] = value
                pos = p.end()
            assert msg[pos:pos + 1] == b"]", f"SD-ELEMENT not closed at {msg[pos:pos + 40]!r}"
            sd[sid[0].decode()] = params
            pos += 1
        assert sd, "no STRUCTURED-DATA"
    rest = msg[pos:]
    assert rest == b"" or rest[:1] == b" ", "MSG must follow a space"
    body = rest[1:]
    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]
    return {"facility": pri // 8, "severity": pri % 8, "version": int(m["version"]), "ts": m["ts"].decode(),
            "host": m["host"].decode(), "app": m["app"].decode(), "procid": m["procid"].decode(),
            "msgid": m["msgid"].decode(), "sd": sd, "msg": body.decode("utf-8")}
