"""The clustered broker of the scale-out issue (27, point 1): three RabbitMQ nodes of the test's own, MQTT 3.1.1,
per-device topic permissions, quorum queues for durable sessions. A device writes only under its own name; a QoS 1
message queued for a device whose node dies reaches it on another node; agents on different nodes hear the
coordinator on a third."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as mqtt
import pytest

from tests.integration.conftest import wait_until
from tests.rabbitmq_cluster import HAVE_RABBITMQ, RabbitCluster
from wire.protocol import agent_topic, job_topic

pytestmark = pytest.mark.skipif(not HAVE_RABBITMQ, reason="rabbitmq-server is not installed")


@pytest.fixture(scope="module")
def cluster():
    with RabbitCluster(3) as c:
        c.add_user("coordinator", admin=True)
        for d in ("dev-a", "dev-b"):
            c.add_user(d)
        yield c


def client(cluster: RabbitCluster, node: int, user: str,
           clean: bool = True) -> tuple[mqtt.Client, list, threading.Event]:
    got: list[tuple[str, bytes]] = []
    lost = threading.Event()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user, clean_session=clean,
                    protocol=mqtt.MQTTv311)
    c.username_pw_set(user, cluster.passwords[user])
    answer: dict = {}
    c.on_connect = lambda cl, u, flags, reason, props=None: answer.setdefault("reason", reason)
    c.on_message = lambda cl, u, m: got.append((m.topic, m.payload))
    c.on_disconnect = lambda *a: lost.set()
    c.connect("127.0.0.1", cluster.nodes[node]["mqtt"])
    c.loop_start()
    wait_until(lambda: "reason" in answer, 20, f"{user} connected to node {node}")
    assert not answer["reason"].is_failure, answer["reason"]
    return c, got, lost


def close(*clients: mqtt.Client) -> None:
    for c in clients:
        c.disconnect()
        c.loop_stop()


def test_a_device_writes_only_under_its_own_name(cluster):
    coord, heard, _ = client(cluster, 0, "coordinator")
    coord.subscribe("fedsentry/v1/agents/+/+", qos=1)
    a, _, a_lost = client(cluster, 1, "dev-a")
    try:
        time.sleep(1)  # the subscriptions are in place
        a.publish(agent_topic("dev-a", "status"), b"mine", qos=1).wait_for_publish(10)
        wait_until(lambda: (agent_topic("dev-a", "status"), b"mine") in heard, 20, "dev-a's own status")
        a.publish(agent_topic("dev-b", "status"), b"forged", qos=1)
        wait_until(a_lost.is_set, 20, "the broker to close the connection of a device writing as another")
        assert (agent_topic("dev-b", "status"), b"forged") not in heard
    finally:
        close(coord, a)


def test_agents_on_other_nodes_hear_the_coordinator_and_a_session_outlives_its_node(cluster):
    a, a_got, _ = client(cluster, 1, "dev-a", clean=False)
    b, b_got, _ = client(cluster, 2, "dev-b")
    coord, _, _ = client(cluster, 0, "coordinator")
    try:
        for c in (a, b):
            c.subscribe(job_topic("j1"), qos=1)
        time.sleep(1)  # the subscriptions are in place
        coord.publish(job_topic("j1"), b"round 1", qos=1).wait_for_publish(10)
        wait_until(lambda: (job_topic("j1"), b"round 1") in a_got and (job_topic("j1"), b"round 1") in b_got, 20,
                   "both agents to hear round 1")
        close(a)  # dev-a goes away with a durable session; its node then dies
        cluster.stop_node(1)
        coord.publish(job_topic("j1"), b"round 2", qos=1).wait_for_publish(10)
        again, again_got, _ = client(cluster, 2, "dev-a", clean=False)
        try:
            wait_until(lambda: (job_topic("j1"), b"round 2") in again_got, 30,
                       "the round queued while dev-a was away, on another node")
        finally:
            close(again)
    finally:
        close(coord, b)
