"""The shipped broker configuration (deploy/mosquitto), run by a real Mosquitto: credentials, ACLs,
revocation and TLS, and a whole job through it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from coordinator.broker import MAX_PACKET, Mosquitto, free_port
from coordinator.service import Coordinator
from edge_agent.agent import Agent, AgentConfig
from edge_agent.sources import Batch
from tests.deploy.clients import check_packet_limit, connect
from tests.integration.conftest import HAVE_MOSQUITTO, parts_for, wait_until
from wire.protocol import MAX_PAYLOAD, Envelope, agent_topic

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
pytestmark = pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed")


def env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def shipped_config(root: Path, plain: int, tls: int) -> str:
    """deploy/mosquitto/mosquitto.conf with the compose volume root (/mosquitto/) moved to `root` and the
    listeners on free ports (1883 may be taken by the host's Mosquitto): nothing else differs."""
    shipped = (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
    conf = shipped.replace("/mosquitto/", f"{root}/")
    for a, b in (("listener 1883 127.0.0.1", f"listener {plain} 127.0.0.1"),
                 ("listener 8883", f"listener {tls} 127.0.0.1")):
        assert a in conf
        conf = conf.replace(a, b)
    changed = [(a, b) for a, b in zip(shipped.splitlines(), conf.splitlines()) if a != b]
    assert all("/mosquitto/" in a or a.startswith("listener ") for a, _ in changed), changed
    return conf


@pytest.fixture
def secure():
    """The compose file's layout (config/, certs/, data/ under one root), made by the shipped scripts as
    the README says, and a Mosquitto started as root (it drops to its own user before reading them).
    Test set-up only: the root is 0755 like /etc (mkdtemp makes it 0700), and data/ belongs to the
    mosquitto user, as the image's entrypoint and Debian's package make it."""
    root = Path(tempfile.mkdtemp(prefix="fedsentry-secure-"))
    root.chmod(0o755)
    config, certs, data, devices = root / "config", root / "certs", root / "data", root / "devices"
    config.mkdir(mode=0o755)
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(data, "mosquitto", "mosquitto")
    shutil.copy(DEPLOY / "mosquitto" / "acl", config / "acl")
    subprocess.run([str(DEPLOY / "gen-certs.sh"), str(certs), "localhost"], check=True, capture_output=True)
    passwd = config / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", str(passwd), "fedsentry-coordinator"], input="coord-secret\n" * 2,
                   text=True, check=True, capture_output=True)
    for dev in ("dev-a", "dev-b", "dev-c"):
        subprocess.run([str(DEPLOY / "enrol-device.sh"), dev, "--passwd", str(passwd), "--out", str(devices),
                        "--ca", str(certs / "ca.crt")], check=True, capture_output=True)
    plain, tls = free_port(), free_port()
    broker = Mosquitto(port=plain, config=shipped_config(root, plain, tls)).start()
    secrets = {d: (devices / f"{d}.mqtt-password").read_text().strip() for d in ("dev-a", "dev-b", "dev-c")}
    yield {"broker": broker, "plain": plain, "tls": tls, "certs": certs, "passwd": passwd, "devices": devices,
           "secret": secrets}
    broker.close()
    shutil.rmtree(root, ignore_errors=True)


def test_wrong_or_missing_credentials_are_refused_at_connect(secure):
    c, reason = connect(secure["plain"], "dev-a", "wrong")
    assert reason is not None and reason.is_failure
    c.loop_stop()
    c, reason = connect(secure["tls"], "dev-a", secure["secret"]["dev-a"], ca=secure["certs"] / "ca.crt")
    assert reason is not None and not reason.is_failure
    c.disconnect()
    c.loop_stop()


def test_a_device_cannot_publish_under_another_id(secure):
    received: list[str] = []
    sub, reason = connect(secure["plain"], "fedsentry-coordinator", "coord-secret")
    assert not reason.is_failure
    sub.on_message = lambda c, u, m: received.append(m.topic)
    sub.subscribe("fedsentry/v1/agents/+/+", qos=1)
    time.sleep(0.3)
    a, _ = connect(secure["tls"], "dev-a", secure["secret"]["dev-a"], ca=secure["certs"] / "ca.crt")
    payload = Envelope("status", "", 0, "dev-b", {}, {"online": True}).encode()
    a.publish(agent_topic("dev-b", "status"), payload, qos=1).wait_for_publish(5)  # MQTT 3.1.1: dropped silently
    a.publish(agent_topic("dev-a", "status"), payload, qos=1).wait_for_publish(5)  # its own topic: allowed
    wait_until(lambda: agent_topic("dev-a", "status") in received, 5, "the allowed message")
    time.sleep(0.5)
    assert agent_topic("dev-b", "status") not in received
    # nor may it write to the coordinator's topics
    a.publish("fedsentry/v1/models/anomaly", b"forged", qos=1, retain=True).wait_for_publish(5)
    time.sleep(0.5)
    got = []
    sub.on_message = lambda c, u, m: got.append(m.payload)
    sub.subscribe("fedsentry/v1/models/anomaly", qos=1)
    time.sleep(0.5)
    assert b"forged" not in got
    a.disconnect()  # its client id is its username: a second connection as dev-a would end this one
    a.loop_stop()
    # MQTT 5 says why: the broker answers the QoS 1 publish with reason code 135, not authorized
    a5, reason = connect(secure["tls"], "dev-a", secure["secret"]["dev-a"], ca=secure["certs"] / "ca.crt",
                         protocol=mqtt.MQTTv5)
    codes = []
    a5.on_publish = lambda c, u, mid, rc, props=None: codes.append(rc.value)
    a5.publish(agent_topic("dev-b", "upload"), payload, qos=1).wait_for_publish(5)
    wait_until(lambda: codes, 5, "PUBACK")
    assert codes == [135]
    for c in (sub, a5):
        c.disconnect()
        c.loop_stop()


def test_a_revoked_device_can_no_longer_connect(secure):
    c, reason = connect(secure["tls"], "dev-c", secure["secret"]["dev-c"], ca=secure["certs"] / "ca.crt")
    assert not reason.is_failure
    c.disconnect()
    c.loop_stop()
    subprocess.run([str(DEPLOY / "enrol-device.sh"), "dev-c", "--passwd", str(secure["passwd"]), "--revoke"],
                   check=True, capture_output=True)
    secure["broker"].proc.send_signal(signal.SIGHUP)  # what --reload PID does
    time.sleep(0.5)
    c, reason = connect(secure["tls"], "dev-c", secure["secret"]["dev-c"], ca=secure["certs"] / "ca.crt")
    assert reason is not None and reason.is_failure
    c.loop_stop()


def test_a_whole_job_through_the_secured_broker(secure, traffic, tmp_path):
    data, split = traffic
    coordinator = Coordinator(f"mqtt://127.0.0.1:{secure['plain']}", f"sqlite:///{tmp_path}/c.db",
                              username="fedsentry-coordinator", password="coord-secret").start()
    agents, threads = [], []
    try:
        for dev, part in zip(("dev-a", "dev-b", "dev-c"), parts_for(split, 3)):
            cfg = AgentConfig(dev, f"mqtts://localhost:{secure['tls']}", str(tmp_path / dev), username=dev,
                              password=secure["secret"][dev], ca_cert=str(secure["certs"] / "ca.crt"))
            a = Agent(cfg, None, iter([Batch(data.feature_names, part)]))
            t = threading.Thread(target=a.run, daemon=True)
            t.start()
            agents.append(a)
            threads.append(t)
        wait_until(lambda: len(coordinator.online_devices()) == 3, 20, "devices online over TLS")
        # a second connection with dev-b's credentials floods an oversized upload: it is cut off, the job is not
        rogue, _ = connect(secure["tls"], "dev-b", secure["secret"]["dev-b"], ca=secure["certs"] / "ca.crt")
        rogue.publish(agent_topic("dev-b", "upload"), bytes(MAX_PACKET + 1), qos=1)
        coordinator.create_job("sec", "pca", "fedmm", {"features": data.feature_names, "rank": 3, "rounds": 5,
                                                       "fraction": 1.0, "seed": 0, "min_agents": 3})
        wait_until(lambda: coordinator.job_status("sec") == "finished", 60, "job over the secured broker")
        wait_until(lambda: all(a.scorer.detector is not None for a in agents), 10, "model at every device")
        # the rogue connection took dev-b's client id (its username), so dev-b reconnected and sent an upload again:
        # refused as the duplicate it is (or, when its round had closed meanwhile, as stale); nothing else
        assert set(coordinator.rejected) <= {"duplicate", "stale"}
        rogue.loop_stop()
    finally:
        for a in agents:
            a.stop.set()
        for t in threads:
            t.join(timeout=10)
        coordinator.close()


def test_a_device_process_loads_tls_when_it_connects_over_tls_and_sends_large_messages(secure):
    """The agent's MQTT client in a fresh interpreter (wire.mqtt imports paho without `ssl`, which make_client
    imports for TLS): it connects over TLS and every large message (writes that block part-way raise
    ssl.SSLWantWriteError, which paho must catch as the real class) is confirmed."""
    dev = "dev-a"
    out = subprocess.run([sys.executable, "-m", "tests.edge_agent.light_client", f"mqtts://localhost:{secure['tls']}",
                          agent_topic(dev, "upload"), "--user", dev, "--password", secure["secret"][dev],
                          "--ca", str(secure["certs"] / "ca.crt"), "--size", str(MAX_PAYLOAD // 4)],
                         capture_output=True, text=True, timeout=120)
    r = json.loads(out.stdout)
    assert r["connected"] and r["confirmed"] == 20, out.stdout + out.stderr
    assert "ssl" in r["imported"] and "http.client" not in r["imported"], r


def test_a_device_reads_its_own_acknowledgements_only(secure):
    ca = secure["certs"] / "ca.crt"
    coord, _ = connect(secure["plain"], "fedsentry-coordinator", "coord-secret")
    a, _ = connect(secure["tls"], "dev-a", secure["secret"]["dev-a"], ca=ca)
    got: list[str] = []
    a.on_message = lambda c, u, m: got.append(m.topic)
    a.subscribe([(agent_topic("dev-a", "ack"), 1), (agent_topic("dev-b", "ack"), 1)])
    time.sleep(0.3)
    for dev in ("dev-b", "dev-a"):  # the coordinator may write every device's ack topic
        coord.publish(agent_topic(dev, "ack"), b"ack", qos=1).wait_for_publish(5)
    wait_until(lambda: agent_topic("dev-a", "ack") in got, 5, "dev-a's acknowledgement")
    time.sleep(0.3)
    assert got == [agent_topic("dev-a", "ack")]
    for c in (coord, a):
        c.disconnect()
        c.loop_stop()


def test_the_largest_envelope_passes_and_a_larger_packet_is_refused(secure):
    """max_packet_size fits wire.protocol.MAX_PAYLOAD (the largest envelope decode accepts) and its topic;
    one byte past MAX_PACKET ends the sender's connection and reaches nobody."""
    received: list[int] = []
    coord, _ = connect(secure["plain"], "fedsentry-coordinator", "coord-secret")
    coord.on_message = lambda c, u, m: received.append(len(m.payload))
    coord.subscribe(agent_topic("dev-a", "upload"), qos=1)
    time.sleep(0.3)
    a, _ = connect(secure["tls"], "dev-a", secure["secret"]["dev-a"], ca=secure["certs"] / "ca.crt")
    check_packet_limit(a, received, "the broker", timeout=30)
    time.sleep(0.5)
    assert received == [MAX_PAYLOAD]
    for c in (coord, a):
        c.disconnect()
        c.loop_stop()


def test_the_private_test_mosquitto_has_the_same_packet_limit():
    broker = Mosquitto().start()
    try:
        c, reason = connect(broker.port, "anyone", None)
        assert not reason.is_failure
        gone = threading.Event()
        c.on_disconnect = lambda *args: gone.set()
        c.publish(agent_topic("dev-a", "upload"), bytes(MAX_PACKET + 1), qos=1)
        assert gone.wait(30), "the private Mosquitto kept a client sending an oversized packet"
        c.loop_stop()
    finally:
        broker.close()


def test_a_device_cannot_take_another_clients_session(secure):
    """With dev-a's credentials and the coordinator's client id, a device ended the coordinator's connection
    (MQTT gives a client id to its newest connection) and took over its persistent session."""
    lost = threading.Event()
    coordinator = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fedsentry-coordinator")
    coordinator.username_pw_set("fedsentry-coordinator", "coord-secret")
    coordinator.on_disconnect = lambda *a: lost.set()
    coordinator.connect("127.0.0.1", secure["plain"])
    coordinator.loop_start()
    try:
        wait_until(coordinator.is_connected, 10, "the coordinator to connect")
        for stolen in ("fedsentry-coordinator", "dev-b"):
            thief = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=stolen)
            thief.username_pw_set("dev-a", secure["secret"]["dev-a"])
            thief.connect("127.0.0.1", secure["plain"])
            thief.loop_start()
            wait_until(thief.is_connected, 10, "the device to connect (as itself)")
            thief.disconnect()
            thief.loop_stop()
        time.sleep(1)
        assert not lost.is_set(), "a device's credentials ended the coordinator's connection"
    finally:
        coordinator.disconnect()
        coordinator.loop_stop()
