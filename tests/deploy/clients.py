"""An MQTT client for the broker tests: connected, with the broker's CONNACK reason."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as mqtt


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
