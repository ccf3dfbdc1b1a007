"""A RabbitMQ cluster of its own for the scale-out tests (issue 27, point 1): `n` nodes on this machine, each with
its own HOME and Erlang cookie, data and log folders and free ports, the MQTT plugin with quorum queues for
durable sessions (`mqtt.durable_queue_type = quorum`: a device's QoS 1 session survives the node it was on), and
nodes 2..n joined to node 1. Devices get per-device topic permissions, as a deployment would: a device writes
only under `fedsentry/v1/agents/<its name>/` and reads rounds, models and its own acknowledgements.

Started from Debian's rabbitmq-server (/usr/lib/rabbitmq/bin), never its system service; stopped and removed at
close."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from coordinator.broker import free_port, wait_for_port

BIN = Path("/usr/lib/rabbitmq/bin")
HAVE_RABBITMQ = (BIN / "rabbitmq-server").exists()


class RabbitCluster:
    def __init__(self, nodes: int = 3):
        self.dir = Path(tempfile.mkdtemp(prefix="fedsentry-rabbit-"))
        self.cookie = secrets.token_hex(16)
        self.nodes = [{"name": f"fs{i}-{os.getpid()}@localhost", "amqp": free_port(), "mqtt": free_port(),
                       "dist": free_port()} for i in range(nodes)]
        self.procs: list[subprocess.Popen] = []
        self.passwords: dict[str, str] = {}

    def env(self, i: int) -> dict[str, str]:
        node, root = self.nodes[i], self.dir / f"node{i}"
        return {**os.environ, "HOME": str(root / "home"), "RABBITMQ_CONF_ENV_FILE": str(root / "env.conf"),
                "RABBITMQ_NODENAME": node["name"], "RABBITMQ_DIST_PORT": str(node["dist"]),
                "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq.conf"), "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
                "RABBITMQ_LOG_BASE": str(root / "log"), "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "plugins"),
                "RABBITMQ_PID_FILE": str(root / "pid"), "ERL_EPMD_ADDRESS": "127.0.0.1"}

    def ctl(self, i: int, *args: str, timeout: float = 120) -> str:
        out = subprocess.run([str(BIN / "rabbitmqctl"), "-n", self.nodes[i]["name"], *args], env=self.env(i),
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} on node {i}: {out.stderr.strip()[-500:]}")
        return out.stdout

    def await_node(self, i: int, timeout: float = 180) -> None:
        """Until node i has booted (rabbitmqctl answers "not running at all" until its VM registers)."""
        end = time.monotonic() + timeout
        while True:
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"node {i} exited with status {self.procs[i].returncode}")
            try:
                self.ctl(i, "await_startup", "--timeout", "20", timeout=40)
                return
            except RuntimeError:
                if time.monotonic() > end:
                    raise
                time.sleep(1)

    def start(self) -> RabbitCluster:
        for i, node in enumerate(self.nodes):
            root = self.dir / f"node{i}"
            for sub in ("home", "mnesia", "log"):
                (root / sub).mkdir(parents=True)
            cookie = root / "home" / ".erlang.cookie"
            cookie.write_text(self.cookie)
            cookie.chmod(0o600)
            (root / "env.conf").write_text("")  # not the system's /etc/rabbitmq/rabbitmq-env.conf
            (root / "plugins").write_text("[rabbitmq_mqtt].\n")
            (root / "rabbitmq.conf").write_text(
                f"listeners.tcp.default = 127.0.0.1:{node['amqp']}\n"
                f"mqtt.listeners.tcp.default = 127.0.0.1:{node['mqtt']}\n"
                "mqtt.allow_anonymous = false\nmqtt.durable_queue_type = quorum\n"
                "mqtt.exchange = amq.topic\nloopback_users = none\n")
            # a session of its own: the script runs the Erlang VM as its child, and a node that will not stop is
            # killed with its whole process group
            self.procs.append(subprocess.Popen([str(BIN / "rabbitmq-server")], env=self.env(i), cwd=root,
                                               stdout=open(root / "out.log", "w"),  # noqa: SIM115
                                               stderr=subprocess.STDOUT, start_new_session=True))
        try:
            for i, node in enumerate(self.nodes):
                self.await_node(i)
                wait_for_port(node["mqtt"], 60)
            for i in range(1, len(self.nodes)):
                self.ctl(i, "stop_app")
                self.ctl(i, "join_cluster", self.nodes[0]["name"])
                self.ctl(i, "start_app")
                wait_for_port(self.nodes[i]["mqtt"], 60)
        except Exception as e:
            logs = "\n".join(f.read_text()[-800:] for f in sorted(self.dir.glob("node*/log/*.log")))
            self.close()
            raise RuntimeError(f"the RabbitMQ cluster did not start: {e}\n{logs}") from None
        return self

    def add_user(self, name: str, admin: bool = False) -> str:
        """A user (the coordinator: `admin`, every topic) or a device: writes only under its own agent topics,
        reads rounds, models and its own acknowledgements and feedback (RabbitMQ's MQTT maps '/' to '.')."""
        # hex: a url-safe token may start with '-', which rabbitmqctl reads as an option (1 password in 64 did)
        password = self.passwords[name] = secrets.token_hex(16)
        self.ctl(0, "add_user", name, password)
        self.ctl(0, "set_permissions", "-p", "/", name, ".*", ".*", ".*")
        if not admin:
            agent = r"^fedsentry\.v1\.agents\.{username}\."
            self.ctl(0, "set_topic_permissions", "-p", "/", name, "amq.topic", agent + r"(status|upload|alerts)$",
                     r"^fedsentry\.v1\.(jobs\..*\.round|models\..*)$|" + agent + r"(ack|feedback|secagg)$")
        return password

    def stop_node(self, i: int) -> None:
        """Stop one node (its Erlang VM): what a crashed broker node does to its clients."""
        self.ctl(i, "stop")
        self.procs[i].wait(timeout=60)

    def start_node(self, i: int) -> None:
        """Start a stopped node again: it rejoins the cluster with its own data."""
        root = self.dir / f"node{i}"
        self.procs[i] = subprocess.Popen([str(BIN / "rabbitmq-server")], env=self.env(i), cwd=root,
                                         stdout=open(root / "out.log", "a"),  # noqa: SIM115
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.await_node(i)
        wait_for_port(self.nodes[i]["mqtt"], 60)

    def close(self) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is None:
                try:
                    self.ctl(i, "stop", timeout=60)
                    p.wait(timeout=30)
                except Exception:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RabbitCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
