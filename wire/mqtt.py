"""Connecting to the broker with paho-mqtt: URL parsing, credentials, TLS, last will, reconnect.

Callbacks run on paho's network thread; keep them thin and hand work to a queue (see the agent and the
coordinator)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from wire.imports import NeverRaisedError, stand_ins

#: what paho-mqtt imports at its top for features a plain TCP connection never uses: TLS (`ssl`), proxies read
#: from the environment (`urllib.request`, consulted only where PySocks is installed; it imports `http.client`,
#: `email` and `ssl`) and the WebSocket handshake (`hashlib`, whose `_hashlib` maps OpenSSL's libcrypto). paho
#: gets a stand-in for each (wire.imports), which imports the module at its first use (measured on the scoring
#: agent with `fedsentry bench agent-memory`, README). paho names ssl's two TLS-only exceptions in `except`
#: clauses around every socket read and write: only a TLS socket raises them, so until `ssl` is imported
#: (make_client does for TLS) they stand for an exception nothing raises instead of importing `ssl` at the first
#: read that would block.
ON_FIRST_USE: dict[str, dict[str, Any] | None] = {
    "ssl": {"SSLWantReadError": NeverRaisedError, "SSLWantWriteError": NeverRaisedError},
    "urllib.request": None,
    "hashlib": None,
}

with stand_ins(ON_FIRST_USE if "paho.mqtt.client" not in sys.modules else {}):
    import paho.mqtt.client as mqtt

#: what paho's publish returns when a message was queued
PUBLISHED = mqtt.MQTT_ERR_SUCCESS


@dataclass
class BrokerURL:
    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = None


def parse_broker_url(url: str) -> BrokerURL:
    """mqtt://[user[:password]@]host[:port] (default port 1883) or mqtts://... (TLS, default 8883)."""
    u = urlparse(url)
    if u.scheme not in ("mqtt", "mqtts", "tcp", "ssl") or not u.hostname:
        raise ValueError(f"invalid broker URL {url!r}: expected mqtt://host[:port] or mqtts://host[:port]")
    tls = u.scheme in ("mqtts", "ssl")
    try:
        port = u.port or (8883 if tls else 1883)
    except ValueError:
        raise ValueError(f"invalid port in broker URL {url!r}") from None
    return BrokerURL(u.hostname, port, tls, unquote(u.username) if u.username else None,
                     unquote(u.password) if u.password else None)


def redact_url(url: str) -> str:
    """The URL as it may be logged or shown: a password in it replaced by ***."""
    u = urlparse(url)
    if u.password is None:
        return url
    host = u.netloc.rpartition("@")[2]
    return u._replace(netloc=f"{u.username}:***@{host}").geturl()


def unreachable_because(host: str, port: int, timeout: float = 3.0) -> str:
    """Why a broker cannot be reached, in words for a log line: nothing listens there, the host does not
    answer, its name does not resolve (a TCP probe; the MQTT client's own failure carries no reason)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "the port accepts connections but the MQTT handshake failed (TLS or protocol mismatch?)"
    except ConnectionRefusedError:
        return f"connection refused: nothing listens on {host}:{port} (wrong --broker port, or the broker is down)"
    except socket.gaierror as e:
        return f"the host name {host!r} does not resolve ({e.strerror})"
    except TimeoutError:
        return f"{host}:{port} does not answer within {timeout:g} s (host down, or a firewall drops the traffic)"
    except OSError as e:
        return f"{host}:{port} is unreachable ({e.strerror or e})"


#: what a refusal for credentials means on a device, and what to do
NOT_AUTHORISED_HINT = ("this device's credentials were refused: enrol it on the server (`fedsentry serve --enrol "
                       "ID` prints the agent's command and writes its password file) and start the agent with "
                       "--mqtt-password-file FILE (or $FEDSENTRY_MQTT_PASSWORD)")


def read_password(path: str) -> str:
    """A password kept in a file (first line, without its line end): never on a command line, where every
    local user can read it in /proc/<pid>/cmdline."""
    with open(path) as f:
        return f.readline().rstrip("\r\n")


def password_from_env(password: str | None = None, password_file: str | None = None) -> str | None:
    """The MQTT password: given, else from the file given or $FEDSENTRY_MQTT_PASSWORD_FILE, else
    $FEDSENTRY_MQTT_PASSWORD."""
    if password:
        return password
    path = password_file or os.environ.get("FEDSENTRY_MQTT_PASSWORD_FILE")
    if path:
        return read_password(path)
    return os.environ.get("FEDSENTRY_MQTT_PASSWORD") or None


def make_client(client_id: str, url: str, username: str | None = None, password: str | None = None,
                tls: bool = False, ca_cert: str | None = None, certfile: str | None = None,
                keyfile: str | None = None, insecure: bool = False,
                will: tuple[str, bytes, int, bool] | None = None,
                clean_session: bool = False) -> tuple[mqtt.Client, BrokerURL]:
    """A paho client configured but not connected (persistent session by default)."""
    b = parse_broker_url(url)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean_session,
                         protocol=mqtt.MQTTv311)
    user, pw = username or b.username, password or b.password
    if user:
        client.username_pw_set(user, pw)
    if tls or b.tls or ca_cert:
        import ssl  # only here: an agent on plain TCP never loads TLS (ON_FIRST_USE)

        client.tls_set(ca_certs=ca_cert, certfile=certfile, keyfile=keyfile, cert_reqs=ssl.CERT_REQUIRED)
        if insecure:
            client.tls_insecure_set(True)
    if will:
        client.will_set(*will)
    client.reconnect_delay_set(min_delay=1, max_delay=30)
    client.max_inflight_messages_set(100)
    client.max_queued_messages_set(0)
    return client, b
