"""What both demos stand on: a broker (embedded unless --broker), the coordinator, agent processes, and the
helpers both use (agents' CSV files, --keep-serving)."""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsentry.errors import UsageError
from models.core.sampling import fleet_name, fleet_names

if TYPE_CHECKING:
    from coordinator.broker import EmbeddedBroker
    from coordinator.service import Coordinator


def write_csv(path: Path, header: list[str], rows: Iterable[Iterable[Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


DEMO_KEY = "demo_admin_key"


def keep_serving(args: argparse.Namespace) -> None:
    if not args.keep_serving:
        print("fedsentry demo: done; the dashboard, the broker and the agents stop now (--keep-serving keeps them "
              "up, with the agents online for new jobs)", file=sys.stderr, flush=True)
        return
    print("fedsentry demo: serving until interrupted (Ctrl-C, or SIGTERM: kill PID)", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def demo_admin_key(session: Any) -> str:
    """The demo's admin key, the same on every run against this database: kept in the secrets table beside
    the cookie-signing key (whoever reads the database can sign in either way). A new one only when it was
    revoked or deleted."""
    from api.security import create_key, verify_key
    from store.db import Secret

    row = session.get(Secret, DEMO_KEY)
    if row is not None:
        key = verify_key(session, row.value)
        if key is not None and key.role == "admin":
            return row.value
    value = create_key(session, "admin")
    if row is None:
        session.add(Secret(name=DEMO_KEY, value=value))
    else:
        row.value = value
    return value


def can_listen(host: str, port: int) -> str | None:
    """None when host:port can be bound (as uvicorn binds it), else why not."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(infos[0][4])
    except OSError as e:
        return e.strerror or str(e)
    return None


class Stack:
    """The embedded broker (unless `broker_url`) knows the `agents` demo agents: each gets its own password,
    through its environment (never its command line, which every local user can read)."""

    def __init__(self, broker_url: str | None, db: str | None, label: str, agents: int, host: str = "127.0.0.1",
                 port: int | None = None, keep_work: bool = False):
        self.broker_url, self.db, self.label, self.n_agents = broker_url, db, label, agents
        self.host, self.port, self.keep_work = host, port, keep_work
        self.tmp = Path(tempfile.mkdtemp(prefix="fedsentry-demo-"))
        self.job_id = f"demo-{uuid.uuid4().hex[:8]}"
        self.broker: EmbeddedBroker | None = None
        self._coordinator: Coordinator | None = None
        self.procs: list[subprocess.Popen] = []
        self.ids: list[str] = []

    def __enter__(self) -> Stack:
        try:
            return self._start()
        except BaseException:
            self.__exit__()
            raise

    def _start(self) -> Stack:
        from coordinator.broker import EmbeddedBroker
        from coordinator.service import Coordinator
        from wire.mqtt import redact_url

        username = password = None
        if not self.broker_url:
            self.broker = EmbeddedBroker(devices=fleet_names(self.n_agents)).start()
            self.broker_url, username, password = self.broker.url, self.broker.username, self.broker.password
        print(f"fedsentry demo: {self.label}; broker {redact_url(self.broker_url)}; work folder {self.tmp}",
              file=sys.stderr, flush=True)
        try:
            self._coordinator = Coordinator(self.broker_url, self.db, username=username, password=password).start()
        except ValueError as e:
            raise UsageError(str(e)) from None
        if not self.coordinator.connected.wait(15):
            raise UsageError(f"cannot reach the MQTT broker at {redact_url(self.broker_url)} (is it running?)")
        self._serve_dashboard()
        return self

    @property
    def coordinator(self) -> Coordinator:
        if self._coordinator is None:
            raise RuntimeError("the stack is not running: use it in a with block")
        return self._coordinator

    def _serve_dashboard(self) -> None:
        """The API and dashboard over the demo's database, on --host:--port (default 127.0.0.1:8000, or a free
        port when 8000 is taken)."""
        import threading

        import uvicorn

        from api.app import create_app
        from api.settings import Settings
        from coordinator.broker import free_port

        app = create_app(Settings(db_url=self.db, cookie_secure=False))
        with app.state.sessions.begin() as s:
            key = demo_admin_key(s)
        port = self.port or (8000 if can_listen(self.host, 8000) is None else free_port())
        problem = can_listen(self.host, port)
        if problem:
            raise UsageError(f"--host/--port: cannot serve the dashboard on {self.host}:{port}: {problem}")
        self.api = uvicorn.Server(uvicorn.Config(app, host=self.host, port=port, log_level="warning",
                                                 timeout_graceful_shutdown=1))
        thread = threading.Thread(target=self.api.run, daemon=True)
        thread.start()
        while not self.api.started:
            if not thread.is_alive():
                raise UsageError(f"--host/--port: the dashboard could not start on {self.host}:{port}")
            time.sleep(0.05)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.dashboard = f"http://{host}:{port}/"
        print(f"fedsentry demo: dashboard {self.dashboard} (sign in with the admin key {key}, the same on every "
              f"demo run with this database)", file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        if getattr(self, "api", None) is not None:
            self.api.should_exit = True
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._coordinator:
            self._coordinator.close()
        if self.broker:
            self.broker.stop()
        if self.keep_work:
            print(f"fedsentry demo: work folder kept: {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def agent(self, i: int, *args: str) -> None:
        """Start agent i (`fedsentry agent` in its own process) with extra arguments; again, once it exited."""
        assert self.broker_url is not None, "start the stack (with block) before its agents"
        name = fleet_name(i, self.n_agents)  # the simulator's client i
        env = {**os.environ, **(self.broker.credentials_env(name) if self.broker else {})}
        restart = name in self.ids
        with open(self.tmp / f"agent-{i}.log", "a" if restart else "w") as log:  # the process has its own copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "fedsentry.cli", "agent", "--broker", self.broker_url, "--id", name,
                 "--state-dir", str(self.tmp / f"agent-{i}"), *args], stdout=subprocess.DEVNULL, stderr=log, env=env)
        if restart:
            self.procs[self.ids.index(name)] = proc
        else:
            self.ids.append(name)
            self.procs.append(proc)

    def wait_online(self, job_type: str, timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            dead = [i for i, p in enumerate(self.procs) if p.poll() is not None]
            if dead:
                err = (self.tmp / f"agent-{dead[0]}.log").read_text().strip().splitlines()[-1:]
                raise UsageError(f"agent {dead[0]} exited: {err[0] if err else 'no output'}")
            if set(self.ids) <= set(self.coordinator.online_devices(job_type)):
                return
            time.sleep(0.1)
        raise UsageError(f"the agents did not come online within {timeout:.0f} s")

    def run_job(self, job_type: str, algorithm: str, params: dict[str, Any], rounds: int) -> float:
        """Create the job, show its progress, return the seconds it took."""
        from store.db import Job

        self.wait_online(job_type)
        self.coordinator.create_job(self.job_id, job_type, algorithm, params)
        t0, last = time.monotonic(), -1
        while True:
            with self.coordinator.sessions() as s:
                job = s.get(Job, self.job_id)
                status, cur, error = job.status, job.current_round, job.error
            if cur != last:
                last = cur
                print(f"\rfedsentry demo: round {cur} ({job.phase})", end="", file=sys.stderr, flush=True)
            if status == "finished":
                print(file=sys.stderr)
                return time.monotonic() - t0
            if status == "failed":
                raise UsageError(f"job {self.job_id} failed: {error}")
            time.sleep(0.1)

    def round_seconds(self) -> list[float]:
        from store.db import Round

        with self.coordinator.sessions() as s:
            return [r.seconds for r in s.query(Round).filter_by(job_id=self.job_id, phase="train")]

    def wait_agents(self, timeout: float = 600) -> None:
        for p in self.procs:
            p.wait(timeout=timeout)
