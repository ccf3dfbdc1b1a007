"""The embedded broker (amqtt: `fedsentry demo`, `serve` without --broker) is secured like the deployed
Mosquitto: per-run credentials, the same ACL, the same packet size limit."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from coordinator.broker import EmbeddedBroker, device_acl
from tests.deploy.clients import check_packet_limit
from tests.deploy.clients import connect as connect_client
from tests.integration.conftest import wait_until
from wire.protocol import MAX_PAYLOAD, agent_topic

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="module")
def embedded():
    b = EmbeddedBroker(devices=["dev-a", "dev-b"]).start()
    yield b
    b.stop()


def connect(broker: EmbeddedBroker, user: str | None, password: str | None):
    return connect_client(broker.port, user, password)


def close(*clients) -> None:
    for c in clients:
        c.disconnect()
        c.loop_stop()


def test_anonymous_and_wrong_passwords_are_refused(embedded):
    for user, password in ((None, None), ("dev-a", "wrong"), ("dev-a", embedded.passwords["dev-b"]),
                           ("stranger", embedded.passwords["dev-a"])):
        c, reason = connect(embedded, user, password)
        assert reason is not None and reason.is_failure, user
        c.loop_stop()
    c, reason = connect(embedded, "dev-a", embedded.passwords["dev-a"])
    assert not reason.is_failure
    close(c)


def test_a_device_cannot_write_as_another_nor_read_everything(embedded):
    coord, reason = connect(embedded, embedded.username, embedded.password)
    assert not reason.is_failure
    seen: list[str] = []
    coord.on_message = lambda c, u, m: seen.append(m.topic)
    coord.subscribe("fedsentry/v1/agents/+/+", qos=1)
    a, _ = connect(embedded, "dev-a", embedded.passwords["dev-a"])
    granted: list[list[int]] = []
    a.on_subscribe = lambda c, u, mid, codes, props=None: granted.append([rc.value for rc in codes])
    a_seen: list[str] = []
    a.on_message = lambda c, u, m: a_seen.append(m.topic)
    for topic in ("#", "fedsentry/v1/agents/+/upload", agent_topic("dev-b", "ack"), agent_topic("dev-a", "ack")):
        a.subscribe(topic, qos=1)
    wait_until(lambda: len(granted) == 4, 5, "four SUBACKs")
    assert granted == [[0x80], [0x80], [0x80], [1]]  # only its own acknowledgements
    time.sleep(0.3)
    a.publish(agent_topic("dev-b", "upload"), b"forged", qos=1).wait_for_publish(5)
    a.publish("fedsentry/v1/jobs/j1/round", b"forged", qos=1).wait_for_publish(5)
    a.publish(agent_topic("dev-a", "upload"), b"mine", qos=1).wait_for_publish(5)
    b, _ = connect(embedded, "dev-b", embedded.passwords["dev-b"])
    b.publish(agent_topic("dev-b", "status"), b"online", qos=1).wait_for_publish(5)
    for dev in ("dev-b", "dev-a"):
        coord.publish(agent_topic(dev, "ack"), b"ack", qos=1).wait_for_publish(5)
    wait_until(lambda: agent_topic("dev-a", "ack") in a_seen, 5, "dev-a's acknowledgement")
    wait_until(lambda: agent_topic("dev-b", "status") in seen, 5, "dev-b's status")
    time.sleep(0.3)
    assert agent_topic("dev-b", "upload") not in seen and agent_topic("dev-a", "upload") in seen
    assert a_seen == [agent_topic("dev-a", "ack")]  # not dev-b's ack, not dev-b's status, not the forged round
    close(coord, a, b)


def test_the_embedded_acl_is_the_deployed_one():
    """device_acl is deploy/mosquitto/acl with %u = the device: one rule set, two brokers."""
    rules = [line.split() for line in (DEPLOY / "mosquitto" / "acl").read_text().splitlines()
             if line.startswith("pattern ")]
    write = [t.replace("%u", "dev-x") for _, access, t in rules if access == "write"]
    read = [t.replace("%u", "dev-x") for _, access, t in rules if access == "read"]
    assert len(write) + len(read) == len(rules)
    assert device_acl("dev-x") == (write, read)


def test_an_oversized_packet_ends_its_sender_and_the_largest_envelope_passes(embedded):
    coord, _ = connect(embedded, embedded.username, embedded.password)
    sizes: list[int] = []
    coord.on_message = lambda c, u, m: sizes.append(len(m.payload))
    coord.subscribe(agent_topic("dev-a", "upload"), qos=1)
    a, _ = connect(embedded, "dev-a", embedded.passwords["dev-a"])
    time.sleep(0.2)
    check_packet_limit(a, sizes, "the embedded broker")
    a.loop_stop()
    time.sleep(0.3)
    assert sizes == [MAX_PAYLOAD]
    b, reason = connect(embedded, "dev-b", embedded.passwords["dev-b"])  # the broker still serves
    assert not reason.is_failure
    close(coord, b)


def test_its_secrets_are_private_and_gone_after_stop():
    b = EmbeddedBroker(devices=["dev-a"]).start()
    folder, pw = b.dir, b.password_file("dev-a")
    try:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        for f in (pw, folder / "passwd"):
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        assert pw.read_text().strip() == b.passwords["dev-a"]
        assert b.password not in (folder / "passwd").read_text()  # hashed
    finally:
        b.stop()
    assert not folder.exists()


def test_a_broker_on_a_state_folder_keeps_its_port_and_passwords_across_restarts(tmp_path):
    """A restarted `serve` (issue 28): its agents reconnect with the port and password file they were given."""
    state = tmp_path / "server"
    first = EmbeddedBroker(devices=["dev-a"], state_dir=state).start()
    port, password, coordinator_pw = first.port, first.passwords["dev-a"], first.password
    first.stop()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "broker.json").stat().st_mode) == 0o600
    again = EmbeddedBroker(devices=["dev-a", "dev-b"], state_dir=state).start()
    try:
        assert (again.port, again.passwords["dev-a"], again.password) == (port, password, coordinator_pw)
        assert again.password_file("dev-a").read_text().strip() == password
        client, reason = connect(again, "dev-a", password)  # the old credentials still work
        assert not reason.is_failure
        close(client)
    finally:
        again.stop()
    third = EmbeddedBroker(devices=["dev-b"], state_dir=state)
    assert third.passwords["dev-b"] == again.passwords["dev-b"]  # enrolled once, kept


def test_serve_on_a_busy_port_says_so_first_and_names_the_flag(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "serve", "--port", str(port), "--db",
                              f"sqlite:///{tmp_path}/x.db", "--state-dir", str(tmp_path / "st")],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    first = out.stderr.strip().splitlines()[0]
    assert first.startswith("fedsentry: error: port") and "in use" in first and "--port" in first, out.stderr


def test_a_port_taken_before_the_embedded_broker_binds_it_is_chosen_again():
    import socket

    broker = EmbeddedBroker(devices=["dev-a"])
    taken = broker.port
    with socket.socket() as thief:  # another process listens on the chosen port first
        thief.bind(("127.0.0.1", taken))
        thief.listen()
        broker.start()
        try:
            assert broker.port != taken and broker.url.endswith(f":{broker.port}")
            client, reason = connect(broker, "dev-a", broker.passwords["dev-a"])
            assert not reason.is_failure  # ours answers, on its own port
            close(client)
        finally:
            broker.stop()


def test_a_healthy_start_logs_no_error(caplog):
    """amqtt logged our own readiness probe of its port as an ERROR on every start ("No data from ...")."""
    import logging

    with caplog.at_level(logging.DEBUG):
        broker = EmbeddedBroker().start()
        try:
            client, reason = connect_client(broker.port, broker.username, broker.password)
            assert reason is not None and not reason.is_failure
            client.disconnect()
            client.loop_stop()
        finally:
            broker.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def test_no_client_takes_another_clients_session(embedded):
    """amqtt alone deletes or takes over the session of the client id a CONNECT names before it checks the
    password: a wrong password, or a device's credentials, under the coordinator's client id ended the
    coordinator's connection. Here such a CONNECT is refused (or, for a device, gets the device's own session,
    as Mosquitto's use_username_as_clientid gives it), and the coordinator keeps its connection and its
    subscriptions."""
    import paho.mqtt.client as mqtt

    def client(client_id: str, user: str | None, password: str | None, clean: bool = True):
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
        if user:
            c.username_pw_set(user, password)
        answer: dict = {}
        c.on_connect = lambda cl, u, flags, reason, props=None: answer.setdefault("reason", reason)
        c.connect("127.0.0.1", embedded.port)
        c.loop_start()
        wait_until(lambda: "reason" in answer, 10, f"the broker's answer to {client_id}")
        return c, answer["reason"]

    coordinator, reason = client(embedded.username, embedded.username, embedded.password, clean=False)
    assert not reason.is_failure
    lost: list[object] = []
    coordinator.on_disconnect = lambda *a: lost.append(a)
    heard: list[bytes] = []
    coordinator.on_message = lambda c, u, m: heard.append(m.payload)
    coordinator.subscribe(agent_topic("+", "status"), qos=1)
    b, reason = client("dev-b", "dev-b", embedded.passwords["dev-b"])
    assert not reason.is_failure
    b_lost: list[object] = []
    b.on_disconnect = lambda *a: b_lost.append(a)
    time.sleep(0.3)
    try:
        attempts = [(embedded.username, None, None, True), (embedded.username, "dev-a", "wrong", True),
                    (embedded.username, "dev-a", "wrong", False), ("dev-b", "stranger", "x", True),
                    (embedded.username, "dev-a", embedded.passwords["dev-a"], True),
                    ("dev-b", "dev-a", embedded.passwords["dev-a"], True)]
        for client_id, user, password, clean in attempts:
            c, reason = client(client_id, user, password, clean)
            if user == "dev-a" and password == embedded.passwords["dev-a"]:
                assert not reason.is_failure  # a device connects: under its own id
                c.publish(agent_topic("dev-a", "status"), b"a", qos=1).wait_for_publish(10)
            else:
                assert reason.is_failure, (client_id, user)
            c.disconnect()
            c.loop_stop()
        thief, reason = client(embedded.username, "dev-b", embedded.passwords["dev-b"])  # dev-b's own session moves
        thief.disconnect()
        thief.loop_stop()
        time.sleep(0.5)
        assert not lost, "a client that was not the coordinator ended the coordinator's connection"
        b.publish(agent_topic("dev-b", "status"), b"b", qos=1)  # dev-b reconnects (paho) and publishes
        wait_until(lambda: b"a" in heard and b"b" in heard, 10, "the coordinator's subscription to still deliver")
    finally:
        close(coordinator, b)


def test_serve_starts_without_an_error_and_leaves_no_secret_behind_on_sigterm(tmp_path):
    """`fedsentry serve` as a service manager runs it: a healthy start prints no ERROR nor traceback, an agent's
    port probe included; SIGTERM ends it within seconds, with status 0, and leaves nothing in the temporary
    directory (the broker's passwords live in the state folder only, 0700 with 0600 files)."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    from coordinator.broker import free_port

    tmp, state, port = tmp_path / "tmp", tmp_path / "state", free_port()
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "serve", "--port", str(port), "--db",
                                 f"sqlite:///{tmp_path}/x.db", "--state-dir", str(state), "--enrol", "dev-a"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        def healthy() -> bool:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status == 200
            except OSError:
                return False

        wait_until(healthy, 60, "serve to answer /healthz")
        broker_port = int((state / "broker.url").read_text().strip().rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", broker_port)):  # a health check that sends no MQTT
            pass
        client, reason = connect_client(broker_port, "dev-a", (state / "dev-a.password").read_text().strip())
        assert reason is not None and not reason.is_failure
        close(client)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    said = errors.read_text()
    assert "ERROR" not in said and "Traceback" not in said, said
    assert list(tmp.iterdir()) == []
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in state.iterdir()), sorted(state.iterdir())


def test_the_brokers_subscriptions_can_change_while_a_loop_reads_them():
    """amqtt loops over its subscriptions across awaits while clients subscribe: the demo's start logged
    "dictionary changed size during iteration" now and then; its loops read a snapshot."""
    from coordinator.broker import _Snapshots

    subs = _Snapshots({"a/#": [], "b/+": []})
    for topic in subs:
        subs[topic + "x"] = []
    for topic, _ in subs.items():
        del subs[topic]
    assert subs == {}
