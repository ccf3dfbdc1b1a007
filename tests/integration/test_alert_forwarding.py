"""Alert forwarding against real receivers: a local HTTP server (webhook) and local syslog servers (UDP, and
TCP with octet counting), fed by a real coordinator that stores real alerts published over Mosquitto. Every
alert arrives once at each receiver: through webhook failures (retried), and across a coordinator restart
mid-stream; every syslog message parses as strict RFC 5424."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import paho.mqtt.client as mqtt
import pytest

from coordinator import forward
from coordinator.forward import Syslog, Webhook
from coordinator.service import Coordinator
from store.db import Alert
from tests.integration.conftest import wait_until
from wire.protocol import agent_topic, alert_batches

# -- receivers ---------------------------------------------------------------------------------------------


class WebhookReceiver:
    """http.server on a free port; answers 500 to the first `failures` requests, then 200."""

    def __init__(self, failures: int = 0, delay: float = 0.0):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.failures, self.delay, self.refused = failures, delay, 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(receiver.delay)
                if receiver.refused < receiver.failures:
                    receiver.refused += 1
                    code = 500
                else:
                    receiver.bodies.append(json.loads(body))
                    receiver.headers.append(dict(self.headers))
                    code = 200
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


def test_the_parser_is_strict():
    ok = b'<132>1 2026-01-02T03:04:05.123456Z h fedsentry 12 alert [x@1 a="q\\"\\]\\\\" b=""] {}'
    parsed = parse_rfc5424(ok)
    assert parsed["sd"] == {"x@1": {"a": 'q"]\\', "b": ""}} and parsed["severity"] == 4
    for bad in (ok.replace(b"<132>", b"<0132>"), ok.replace(b"T03", b" 03"), ok.replace(b'\\]', b"]"),
                ok.replace(b"1 2026", b"2026"), ok.replace(b'b=""', b"b=x"), ok.replace(b" alert ", b" alert")):
        with pytest.raises(AssertionError):
            parse_rfc5424(bad)


# -- a device sending real alerts over MQTT -------------------------------------------------------------------


def alerts(n: int) -> list[dict]:
    return [{"id": uuid.uuid4().hex, "ts": time.time() - i, "score": 5.0 + i, "threshold": 1.0, "count": 1,
             "explanation": [{"feature": 'src]"\\bytes', "share": 1.0, "value": 9.0, "expected": 1.0}]}
            for i in range(n)]


def publish(url: str, device: str, batch: list[dict]) -> None:
    host, port = url.removeprefix("mqtt://").rsplit(":", 1)
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{device}-{uuid.uuid4().hex[:6]}")
    c.connect(host, int(port))
    c.loop_start()
    for env in alert_batches("job-1", 3, device, batch):
        c.publish(agent_topic(device, "alerts"), env.encode(), qos=1).wait_for_publish(10)
    c.loop_stop()
    c.disconnect()


def assert_once_each(expected: set[str], *receivers) -> None:
    for r in receivers:
        wait_until(lambda r=r: set(r.ids()) >= expected, 30, f"every alert at {getattr(r, 'url', r)}")
    time.sleep(0.5)  # anything sent twice would arrive by now
    for r in receivers:
        counts = Counter(r.ids())
        assert set(counts) == expected and max(counts.values()) == 1, (
            r.url, len(expected), len(counts), [i for i, n in counts.items() if n > 1][:5])


@pytest.fixture
def receivers():
    out = WebhookReceiver(failures=3), SyslogReceiver("udp"), SyslogReceiver("tcp")
    yield out
    for r in out:
        r.close()


def test_every_alert_once_at_each_receiver_through_webhook_failures(broker, receivers, tmp_path, monkeypatch):
    monkeypatch.setattr(forward, "BACKOFF", (0.2, 1.0))
    hook, udp, tcp = receivers
    dests = [Webhook(hook.url, [("Authorization", "Bearer s3cret")]), Syslog(udp.url), Syslog(tcp.url, 17, 4)]
    c = Coordinator(broker.url, f"sqlite:///{tmp_path}/c.db", forward=dests).start()
    try:
        wait_until(c.connected.is_set, 10, "coordinator connected")
        sent = {d: alerts(110) for d in ("dev-1", "dev-2", "dev-3")}
        for d, batch in sent.items():
            publish(broker.url, d, batch)
        expected = {a["id"] for b in sent.values() for a in b}
        assert_once_each(expected, hook, udp, tcp)
    finally:
        c.close()
    assert hook.refused == 3  # failed three times, then delivered
    # the webhook body is the stored alert, every column but the acknowledgement
    columns = {col.key for col in Alert.__table__.columns} - {"acknowledged", "acknowledged_at", "acknowledged_by",
                                                               "ack_note"}
    body = hook.bodies[0]
    assert set(body) == columns and body["device_id"] in sent and body["job_id"] == "job-1"
    assert body["model_version"] == 3 and body["explanation"][0]["feature"] == 'src]"\\bytes'
    assert hook.headers[0]["Authorization"] == "Bearer s3cret" and hook.headers[0]["Idempotency-Key"] == body["id"]
    # syslog: strict RFC 5424, default local0.warning over UDP, the facility chosen over TCP
    by_id = {a["id"]: a for b in sent.values() for a in b}
    for r, facility in ((udp, 16), (tcp, 17)):
        for m in r.messages:
            p = parse_rfc5424(m)
            assert (p["facility"], p["severity"], p["version"]) == (facility, 4, 1)
            assert (p["app"], p["msgid"]) == ("fedsentry", "alert")
            sd = p["sd"]["fedsentry@32473"]
            a = by_id[sd["id"]]
            assert float(sd["score"]) == a["score"] and float(sd["threshold"]) == a["threshold"]
            assert sd["job_id"] == "job-1" and sd["model_version"] == "3" and sd["device_id"] in sent
            assert json.loads(p["msg"])["id"] == sd["id"]
            assert abs(datetime.fromisoformat(p["ts"].replace("Z", "+00:00")).timestamp() - a["ts"]) < 1e-5


def start_coordinator(url: str, db: str, hook: WebhookReceiver, udp: SyslogReceiver, tcp: SyslogReceiver):
    env = {**os.environ, "FEDSENTRY_FORWARD_WEBHOOK_HEADERS": "Authorization: Bearer t0ken"}
    return subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "coordinator", "--broker", url, "--db", db,
                             "--forward-webhook", hook.url, "--forward-syslog", udp.url, "--forward-syslog", tcp.url,
                             "--forward-syslog-facility", "local3"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_restart_mid_stream_loses_nothing_and_repeats_nothing(broker, tmp_path):
    hook, udp, tcp = WebhookReceiver(delay=0.01), SyslogReceiver("udp"), SyslogReceiver("tcp")
    db = f"sqlite:///{tmp_path}/c.db"
    proc = start_coordinator(broker.url, db, hook, udp, tcp)
    try:
        first = []
        while not hook.bodies:  # until the coordinator has subscribed (an alert before that is not queued)
            first += alerts(1)
            publish(broker.url, "dev-1", first[-1:])
            time.sleep(0.3)
        first = [a for a in first if a["id"] in hook.ids()]  # those sent before are not queued for it
        first += alerts(300)
        publish(broker.url, "dev-1", first[-300:])
        wait_until(lambda: len(hook.bodies) >= 30, 30, "forwarding under way")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
        assert 30 <= len(hook.bodies) < len(first) - 100  # stopped mid-stream
        second = alerts(100)
        publish(broker.url, "dev-2", second)  # while the coordinator is down: queued by the broker
        proc = start_coordinator(broker.url, db, hook, udp, tcp)
        assert_once_each({a["id"] for a in first + second}, hook, udp, tcp)
        assert {h["Authorization"] for h in hook.headers} == {"Bearer t0ken"}
        assert {parse_rfc5424(m)["facility"] for m in tcp.messages} == {19}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for r in (hook, udp, tcp):
            r.close()


@pytest.mark.parametrize("argv, env, says", [
    (["--forward-syslog", "http://h:514"], {}, "--forward-syslog: 'http://h:514': expected udp://host:port"),
    (["--forward-syslog", "udp://h:99999"], {}, "--forward-syslog: 'udp://h:99999': Port out of range"),
    (["--forward-syslog-facility", "local9"], {}, "--forward-syslog-facility: unknown syslog facility 'local9'"),
    ([], {"FEDSENTRY_FORWARD_WEBHOOK": "ftp://x"}, "$FEDSENTRY_FORWARD_WEBHOOK (--forward-webhook): 'ftp://x'"),
    (["--forward-webhook", "http://x"], {"FEDSENTRY_FORWARD_WEBHOOK_HEADERS": "Bearer abc"},
     "$FEDSENTRY_FORWARD_WEBHOOK_HEADERS line 1: expected 'Name: value'"),
    (["--forward-webhook", "http://x", "--forward-webhook-header-file", "/nonexistent"], {},
     "--forward-webhook-header-file: cannot read /nonexistent"),
])
def test_bad_forwarding_settings_are_refused_naming_the_flag(argv, env, says, tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "coordinator", "--broker", "mqtt://127.0.0.1:9",
                          "--db", f"sqlite:///{tmp_path}/c.db", *argv], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_structured_data_escapes_and_carries_extra_fields():
    """Fields an alert gains later (a flow, here) reach STRUCTURED-DATA, escaped; the JSON carries them all."""
    from coordinator import syslog

    a = {"id": "a1", "device_id": "dev-1", "job_id": "j", "model_version": 2, "score": 3.5, "threshold": 1.0,
         "count": 1, "explanation": [], "flow": {"uid": "C1x", "service": 'a]b"c\\d', "id.orig_p": 51000}}
    p = parse_rfc5424(syslog.message(a, datetime(2026, 1, 2, 3, 4, 5, 6), 16, 4, "host-1"))
    assert p["ts"] == "2026-01-02T03:04:05.000006Z" and p["host"] == "host-1"
    assert p["sd"]["fedsentry@32473"] == {"id": "a1", "device_id": "dev-1", "job_id": "j", "model_version": "2",
                                          "score": "3.5", "threshold": "1.0", "count": "1", "uid": "C1x",
                                          "service": 'a]b"c\\d', "id.orig_p": "51000"}
    assert json.loads(p["msg"]) == a


def test_a_hanging_webhook_never_holds_up_ingestion(broker, tmp_path):
    hook = WebhookReceiver(delay=3.0)
    c = Coordinator(broker.url, f"sqlite:///{tmp_path}/c.db", forward=[Webhook(hook.url)]).start()
    try:
        wait_until(c.connected.is_set, 10, "coordinator connected")
        t0 = time.monotonic()
        publish(broker.url, "dev-1", alerts(200))
        wait_until(lambda: c.alerts_ingested == 200, 10, "alerts stored")
        assert time.monotonic() - t0 < 2.5 and not hook.bodies  # stored while the webhook still hangs
    finally:
        c.close()
        hook.close()
