"""An MQTT client for the broker tests: connected, with the broker's CONNACK reason."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as mqtt

from coordinator.broker import MAX_PACKET
from tests.integration.conftest import wait_until
from wire.protocol import MAX_PAYLOAD, agent_topic


def connect(port: int, user: str | None, password: str | None, ca=None, protocol=mqtt.MQTTv311):
    """A connected client and its CONNACK reason (None if none came)."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"t-{user}-{time.monotonic_ns()}", protocol=protocol)
    if user:
        c.username_pw_set(user, password)
    if ca:
        c.tls_set(ca_certs=str(ca))
    result = {}
    done = threading.Event()

    def on_connect(client, userdata, flags, reason, props=None):
        result["reason"] = reason
        done.set()

    c.on_connect = on_connect
    c.connect("127.0.0.1", port)
    c.loop_start()
    done.wait(10)
    return c, result.get("reason")


def check_packet_limit(device, received: list[int], broker: str, timeout: float = 60) -> None:
    """The largest legitimate envelope passes (a subscriber records its size in `received`); one byte over
    the packet limit disconnects its sender."""
    device.publish(agent_topic("dev-a", "upload"), bytes(MAX_PAYLOAD), qos=1).wait_for_publish(timeout)
    wait_until(lambda: received, timeout, "the largest legitimate message")
    gone = threading.Event()
    device.on_disconnect = lambda *args: gone.set()
    device.publish(agent_topic("dev-a", "upload"), bytes(MAX_PACKET + 1), qos=1)
    assert gone.wait(30), f"{broker} kept a client sending an oversized packet"
