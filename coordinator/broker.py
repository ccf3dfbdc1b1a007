"""Brokers the product starts itself: the embedded pure-Python broker (amqtt) for `fedsentry demo`
and `serve` when no --broker is given, and a private Mosquitto on a free port (tests, benchmarks).
The embedded broker listens on a free port, never on 1883, where a Mosquitto may already run.

The embedded broker is secured like the deployed Mosquitto (deploy/mosquitto): no anonymous clients,
a random password per run for the coordinator and for each device it is told of, and the same ACL."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wire.protocol import JOB_SUBSCRIPTION, MAX_PAYLOAD, PREFIX, agent_topic, check_id

if TYPE_CHECKING:
    from amqtt.broker import Broker

log = logging.getLogger("fedsentry.broker")

COORDINATOR_USER = "fedsentry-coordinator"
#: the largest MQTT packet a broker accepts: the largest envelope the protocol decodes (wire.protocol:
#: recommendation rounds and uploads are item-sized) and room for its topic and MQTT headers
MAX_PACKET = MAX_PAYLOAD + 64 * 1024


def device_acl(agent_id: str) -> tuple[list[str], list[str]]:
    """What a device may write and read: deploy/mosquitto/acl with %u = its username (= its agent id)."""
    write = [agent_topic(agent_id, what) for what in ("status", "upload", "alerts")]
    read = [JOB_SUBSCRIPTION, f"{PREFIX}/models/#", agent_topic(agent_id, "ack"), agent_topic(agent_id, "feedback"),
            agent_topic(agent_id, "secagg")]
    return write, read


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0, alive: Callable[[], int | None] | None = None) -> None:
    """Wait until something listens on the port; with `alive` (a process's poll), give up as soon as that
    process has exited."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if alive is not None and alive() is not None:
            raise TimeoutError(f"the process meant to listen on port {port} exited")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class ProbeFilter(logging.Filter):
    """amqtt logs, as an ERROR, every connection that closes before sending an MQTT packet: our own readiness probe
    (wait_for_port) on every healthy start, and any health check or port scanner. Not an error of the broker:
    dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No data from")


class EmbeddedBroker:
    """amqtt in a background thread with its own event loop.

    Clients authenticate (amqtt's FileAuthPlugin): the coordinator as `username`/`password`, each device
    in `devices` with its agent id and `passwords[id]`, also written to `password_file(id)` (mode 0600,
    in a folder of this run only, removed at stop). amqtt's TopicAccessControlListPlugin applies the
    deployed ACL (`device_acl`): anonymous clients are refused, a device publishes only under its own id
    and subscribes only to rounds, models and its own acknowledgements. Packets over `max_packet` bytes
    end the sender's connection."""

    def __init__(self, port: int | None = None, devices: Iterable[str] = (), max_packet: int = MAX_PACKET,
                 state_dir: str | os.PathLike | None = None):
        """With `state_dir`, its port and every password are kept there (0600 files in a 0700 folder) and taken
        again by the next broker on that folder: a restarted server's agents reconnect with what they have.
        Without, they are new each run and the folder goes at stop."""
        self.persistent = state_dir is not None
        if state_dir is not None:
            self.dir = Path(state_dir)
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.dir, 0o700)
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="fedsentry-broker-"))  # mode 0700
        saved = self._saved()
        self._any_port = not port and not saved.get("port")  # ours to choose again if another process takes it
        self.port = port or saved.get("port") or free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.username, self.password = COORDINATOR_USER, saved.get("password") or secrets.token_urlsafe(24)
        self.passwords: dict[str, str] = {}
        for d in devices:
            check_id(d, "device id")
            if d == COORDINATOR_USER:
                raise ValueError(f"{d!r} is the coordinator's username, not a device id")
            self.passwords[d] = saved.get("devices", {}).get(d) or secrets.token_urlsafe(24)
        self.max_packet = max_packet
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="amqtt", daemon=True)
        self._broker: Broker | None = None

    def _saved(self) -> dict[str, Any]:
        f = self.dir / "broker.json"
        if not self.persistent or not f.exists():
            return {}
        try:
            saved = json.loads(f.read_text())
            return saved if isinstance(saved, dict) else {}
        except (OSError, ValueError):
            log.warning("%s is unreadable: the embedded broker starts with a new port and new passwords", f)
            return {}

    def password_file(self, device: str) -> Path:
        return self.dir / f"{device}.password"

    @property
    def url_file(self) -> Path:
        """With a state folder: a file holding the broker's URL alone (`fedsentry agent --broker-file`)."""
        return self.dir / "broker.url"

    def credentials_env(self, device: str) -> dict[str, str]:
        """The environment that gives `fedsentry agent` this device's credentials (never its argv)."""
        return {"FEDSENTRY_MQTT_USERNAME": device, "FEDSENTRY_MQTT_PASSWORD_FILE": str(self.password_file(device))}

    def _write_secrets(self) -> Path:
        from pwdlib.hashers.argon2 import Argon2Hasher

        # the passwords are 192 random bits: a costly hash would add nothing but start-up time per device
        hasher = Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1)
        users = {self.username: self.password, **self.passwords}
        passwd = self.dir / "passwd"
        write_private(passwd, "".join(f"{u}:{hasher.hash(pw)}\n" for u, pw in users.items()))
        for d, pw in self.passwords.items():
            write_private(self.password_file(d), pw + "\n")
        if self.persistent:
            known = self._saved().get("devices", {})
            write_private(self.dir / "broker.json", json.dumps({"port": self.port, "password": self.password,
                                                                 "devices": {**known, **self.passwords}}))
            write_private(self.url_file, self.url + "\n")
        return passwd

    def config(self, passwd: Path) -> dict[str, Any]:
        acls = {d: device_acl(d) for d in self.passwords}
        everything = [f"{PREFIX}/#"]
        return {
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{self.port}", "max_connections": 10000}},
            "plugins": {
                "amqtt.plugins.authentication.FileAuthPlugin": {"password_file": str(passwd)},
                "amqtt.plugins.topic_checking.TopicAccessControlListPlugin": {
                    "publish_acl": {self.username: everything, **{d: w for d, (w, _) in acls.items()}},
                    # subscriptions: amqtt 0.12's plugin settings name them `acl` (it warns the name is
                    # deprecated for `subscribe-acl`, which its settings class does not take yet)
                    "acl": {self.username: everything, **{d: r for d, (_, r) in acls.items()}},
                },
            },
        }

    def start(self) -> EmbeddedBroker:
        for name in ("amqtt", "transitions"):  # amqtt logs every probe of its port as a failed session
            logging.getLogger(name).setLevel(logging.ERROR)
        if not any(isinstance(f, ProbeFilter) for f in logging.getLogger("amqtt.broker").filters):
            logging.getLogger("amqtt.broker").addFilter(ProbeFilter())
        passwd = self._write_secrets()
        self._thread.start()

        async def _start(config: dict[str, Any]) -> None:
            self._broker = _broker_class(self.max_packet, self.username, set(self.passwords))(config)
            await self._broker.start()

        for attempt in range(5):  # a free port can be taken between choosing and binding it (tests beside load)
            try:
                asyncio.run_coroutine_threadsafe(_start(self.config(passwd)), self._loop).result(timeout=30)
                break
            except Exception as e:  # amqtt wraps the bind error in its own
                if not self._any_port or attempt == 4 or "address already in use" not in str(e).lower() + str(
                        e.__cause__).lower():
                    raise
                self._broker = None
                self.port = free_port()
                self.url = f"mqtt://127.0.0.1:{self.port}"
                if self.persistent:
                    self._write_secrets()
        wait_for_port(self.port)
        log.info("embedded MQTT broker on %s", self.url)
        return self

    def close(self) -> None:
        """Stop for good (the same as `stop`, which removes its folder already)."""
        self.stop()

    def stop(self) -> None:
        if self._broker is not None:
            asyncio.run_coroutine_threadsafe(self._broker.shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self.persistent:
            shutil.rmtree(self.dir, ignore_errors=True)


def write_private(path: Path, text: str) -> None:
    """Write a secret readable by its owner only, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class PacketTooLargeError(Exception):
    """Ends the connection of a client sending a packet over the limit."""


class _Snapshots(dict[Any, Any]):
    """A dict whose iteration reads a copy of its keys or items: it may change while a loop over it waits."""

    def __iter__(self) -> Any:
        return iter(list(super().keys()))

    def items(self) -> Any:
        return list(super().items())


def _broker_class(limit: int, coordinator: str, devices: set[str]) -> Any:
    """amqtt's Broker with what the deployed Mosquitto does and amqtt 0.12 does not:

    - packets over `limit` bytes are refused (Mosquitto's max_packet_size): amqtt reads a packet's body in one
      read of its announced length, so a read over the limit is refused before the bytes are buffered, and the
      sender's connection ends;
    - a client is authenticated before its CONNECT touches any session. amqtt deletes the session of the client
      id a CONNECT names (clean session), or copies the newcomer's credentials into it, and takes over its live
      connection, all before it checks the password: anyone who reaches the port could end the coordinator's
      connection by naming its client id. Here a CONNECT that fails authentication is answered "not
      authorised" and closed with every session untouched;
    - a device's client id is its username (Mosquitto's use_username_as_clientid, deploy/mosquitto): whatever
      id a device names, it gets its own session, never the coordinator's or another device's. The coordinator's
      credentials may name any client id but a device's."""
    from amqtt.broker import Broker
    from amqtt.errors import AMQTTError, MQTTError, NoDataError
    from amqtt.mqtt.connack import NOT_AUTHORIZED, ConnackPacket
    from amqtt.mqtt.protocol.broker_handler import BrokerProtocolHandler
    from amqtt.utils import gen_client_id

    class _Reader:
        def __init__(self, reader: asyncio.StreamReader, peer: Any):
            self._reader, self._peer = reader, peer

        async def read(self, n: int = -1) -> bytes:
            return await self._reader.read(n)

        async def readexactly(self, n: int) -> bytes:
            if n > limit:
                log.warning("embedded broker: %s sent a packet of %d bytes (limit %d): disconnected",
                            self._peer, n, limit)
                raise PacketTooLargeError(n)
            return await self._reader.readexactly(n)

        def feed_eof(self) -> None:
            self._reader.feed_eof()

    class FedSentryBroker(Broker):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            # amqtt 0.12 iterates its subscriptions across awaits (broadcasting, a new session's retained
            # messages) while other clients subscribe: "dictionary changed size during iteration" in the demo's
            # start, now and then. Its loops read a snapshot instead.
            self._subscriptions: dict[str, Any] = _Snapshots(self._subscriptions)

        async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                   listener_name: str) -> None:
            reader_proxy: Any = _Reader(reader, writer.get_extra_info("peername"))
            await super().stream_connected(reader_proxy, writer, listener_name)

        async def _refuse(self, session: Any, writer: Any, why: str) -> None:
            log.warning("embedded broker: refused client id %r (user %r): %s", session.client_id,
                        session.username, why)
            await ConnackPacket.build(0, NOT_AUTHORIZED).to_stream(writer)
            await writer.close()
            raise AMQTTError(why)

        async def _initialize_client_session(self, reader: Any, writer: Any, remote_address: str,
                                             remote_port: int) -> tuple[Any, Any]:
            # amqtt 0.12's own steps (Broker._initialize_client_session), with the checks above before the
            # first one that touches a stored session
            try:
                handler, session = await BrokerProtocolHandler.init_from_connect(reader, writer, self.plugins_manager)
            except MQTTError:
                await writer.close()
                raise
            except NoDataError as exc:
                raise AMQTTError(exc) from exc
            if not await self._authenticate(session, None):
                await self._refuse(session, writer, "not authenticated")
            if session.username != coordinator:
                session.client_id = session.username
            elif session.client_id in devices:
                await self._refuse(session, writer, "a device's client id")
            if session.clean_session:
                if session.client_id:
                    await self._delete_session(session.client_id)
                else:
                    session.client_id = gen_client_id()
                session.parent = 0
            elif session.client_id in self._sessions:
                existing, _ = self._sessions[session.client_id]
                for name in ("will_flag", "will_message", "will_topic", "will_qos", "keep_alive", "username",
                             "password"):
                    setattr(existing, name, getattr(session, name))
                session = existing
                session.parent = 1
            else:
                session.parent = 0
            delay = self.config.get("timeout-disconnect-delay", 0)
            if session.keep_alive > 0 and isinstance(delay, int):
                session.keep_alive += delay
            return handler, session

    return FedSentryBroker


class Mosquitto:
    """A private Mosquitto on a free port, with persistence in a temporary folder (or `config` text)."""

    def __init__(self, port: int | None = None, config: str | None = None):
        binary = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
        if binary is None:
            raise FileNotFoundError("mosquitto is not installed")
        self.binary: str = binary
        self._any_port = port is None and config is None  # ours to change if another process takes it first
        self.dir = Path(tempfile.mkdtemp(prefix="fedsentry-mosquitto-"))
        self._config = config
        self._use_port(port or free_port())
        self.proc: subprocess.Popen | None = None

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.config = self._config or (
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {self.dir}/\nmax_queued_messages 100000\n"
            f"max_packet_size {MAX_PACKET}\n"
            # the coordinator acknowledges alerts once stored, in batches: a window of 20 unacknowledged
            # messages (the default) would cap ingestion
            "max_inflight_messages 1000\n")

    def start(self) -> Mosquitto:
        """Start it and wait until it listens. A free port can be taken by another process between choosing
        and binding it (tests run beside other load): then Mosquitto exits, and a port is chosen again (never
        mistaking the other process's listener for ours). A restart keeps the port its clients know."""
        for _ in range(5):
            conf = self.dir / "mosquitto.conf"
            conf.write_text(self.config)
            self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                         stderr=open(self.dir / "log.txt", "w"))  # noqa: SIM115
            try:
                wait_for_port(self.port, alive=self.proc.poll)
                if self._running():
                    self._any_port = False
                    return self
            except TimeoutError:
                self.stop()
            if not self._any_port:
                break
            self._use_port(free_port())
        raise RuntimeError(f"mosquitto did not start: {(self.dir / 'log.txt').read_text()[-500:]}")

    def _running(self, timeout: float = 10.0) -> bool:
        """Whether the listener on our port is this Mosquitto: another process's listener answers a connection as
        well, and a Mosquitto that lost the port may take longer than any fixed pause to exit (under load). It logs
        "running" once every listener is bound, and exits when one cannot be."""
        assert self.proc is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            if " running" in (self.dir / "log.txt").read_text(errors="replace"):
                return True
            time.sleep(0.02)
        return self.proc.poll() is None  # a configuration that logs elsewhere: alive and listening

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        """Stop for good: the persistence folder goes too (`stop` keeps it for a restart)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
