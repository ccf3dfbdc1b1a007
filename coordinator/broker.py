"""Brokers the product starts itself: the embedded pure-Python broker (amqtt) for `fedsentry demo`
and `serve` when no --broker is given, and a private Mosquitto on a free port (tests, benchmarks).
The embedded broker listens on a free port, never on 1883, where a Mosquitto may already run."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqtt.broker import Broker

log = logging.getLogger("fedsentry.broker")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class EmbeddedBroker:
    """amqtt in a background thread with its own event loop."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="amqtt", daemon=True)
        self._broker: Broker | None = None

    def start(self) -> EmbeddedBroker:
        from amqtt.broker import Broker

        for name in ("amqtt", "transitions"):  # amqtt logs every probe of its port as a failed session
            logging.getLogger(name).setLevel(logging.ERROR)
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{self.port}", "max_connections": 10000}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }
        self._thread.start()

        async def _start() -> None:
            self._broker = Broker(config)
            await self._broker.start()

        asyncio.run_coroutine_threadsafe(_start(), self._loop).result(timeout=30)
        wait_for_port(self.port)
        log.info("embedded MQTT broker on %s", self.url)
        return self

    def stop(self) -> None:
        if self._broker is not None:
            asyncio.run_coroutine_threadsafe(self._broker.shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


class Mosquitto:
    """A private Mosquitto on a free port, with persistence in a temporary folder (or `config` text)."""

    def __init__(self, port: int | None = None, config: str | None = None):
        binary = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
        if binary is None:
            raise FileNotFoundError("mosquitto is not installed")
        self.binary: str = binary
        self.port = port or free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="fedsentry-mosquitto-"))
        self.config = config or (f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
                                 f"persistence_location {self.dir}/\nmax_queued_messages 100000\n"
                                 # the coordinator acknowledges alerts once stored, in batches: a window of 20
                                 # unacknowledged messages (the default) would cap ingestion
                                 "max_inflight_messages 1000\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> Mosquitto:
        conf = self.dir / "mosquitto.conf"
        conf.write_text(self.config)
        self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / "log.txt", "w"))  # noqa: SIM115
        wait_for_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
