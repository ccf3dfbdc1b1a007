"""No reliance on retained messages (issue 27, point 6): a clustered broker keeps a retained message on one node only
(RabbitMQ), so the driver publishes an open round's message again, and the promoted model now and then. Here the
retained copies are cleared, as on a node that never had them: a device subscribing afterwards still hears the open
round and gets the model, and an agent that has the model does not load it again."""

from __future__ import annotations

import time

from coordinator import job_runner
from edge_agent.sources import Batch
from store.db import Job
from tests.integration.conftest import parts_for, wait_until
from tests.integration.test_pca_job import publish_as
from wire.mqtt import make_client
from wire.protocol import Envelope, decode, job_topic, model_topic


def _listen(url: str, topic: str) -> tuple[list[bytes], object]:
    got: list[bytes] = []
    client, b = make_client(f"listener-{time.monotonic_ns()}", url, clean_session=True)
    client.on_message = lambda c, u, m: got.append(bytes(m.payload)) if m.payload else None
    client.connect(b.host, b.port)
    client.subscribe(topic, qos=1)
    client.loop_start()
    return got, client


def _clear(url: str, topic: str) -> None:
    """What a node that never had the retained message shows a new subscriber: nothing."""
    client, b = make_client(f"clear-{time.monotonic_ns()}", url, clean_session=True)
    client.connect(b.host, b.port)
    client.loop_start()
    client.publish(topic, b"", qos=1, retain=True).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


def test_an_open_round_is_published_again(broker, coordinator, fleet, traffic, monkeypatch):
    monkeypatch.setattr(job_runner, "REPUBLISH_S", 1.0)
    data, split = traffic
    fleet.add("dev-0", parts_for(split, 2)[0], data.feature_names)
    # a second participant that never answers holds the statistics round open
    status = Envelope("status", "", 0, "dev-mute", {}, {"online": True, "jobs": ["pca"],
                                                         "features": data.feature_names})
    publish_as(broker.url, "dev-mute", "status", status.encode())
    wait_until(lambda: {"dev-0", "dev-mute"} <= set(coordinator.online_devices("pca")), 20, "both online")
    coordinator.create_job("rp", "pca", "fedmm", {"features": data.feature_names, "rank": 2, "rounds": 2,
                                                   "min_agents": 2, "deadline": 60})
    wait_until(lambda: coordinator.job_status("rp") == "running", 20, "the job running")
    _clear(broker.url, job_topic("rp"))
    got, client = _listen(broker.url, job_topic("rp"))
    try:
        wait_until(lambda: got, 5, "the open round's message published again")
        env = decode(got[0])
        assert (env.kind, env.round, env.meta["phase"]) == ("round", 0, "stats")
    finally:
        client.disconnect()
        client.loop_stop()
    with coordinator.sessions() as s:
        assert s.get(Job, "rp").status == "running"  # still the same round: nobody asked to answer again


def test_the_promoted_model_is_published_again_and_not_loaded_twice(broker, coordinator, fleet, traffic):
    data, split = traffic
    parts = parts_for(split, 3)
    agents = [fleet.add(f"dev-{i}", p, data.feature_names) for i, p in enumerate(parts)]
    wait_until(lambda: len(coordinator.online_devices("pca")) == 3, 20, "agents online")
    coordinator.create_job("rm", "pca", "fedmm", {"features": data.feature_names, "rank": 2, "rounds": 3,
                                                   "min_agents": 3, "fraction": 1.0})
    wait_until(lambda: coordinator.job_status("rm") == "finished", 60, "the job finished")
    wait_until(lambda: all(a.scorer.model_job == "rm" for a in agents), 20, "the model at every agent")
    first = agents[0]
    loads = []
    original = first.load_model
    first.load_model = lambda env, **kw: (loads.append(env.job), original(env, **kw))[1]  # counts, then loads
    _clear(broker.url, model_topic())
    coordinator.model_republish = 0.5
    got, client = _listen(broker.url, model_topic())
    try:
        wait_until(lambda: got, 10, "the promoted model published again")
        assert decode(got[0]).job == "rm"
        late = fleet.add("dev-late", None, data.feature_names, wait_for_model=True,
                         source=iter([Batch(data.feature_names, split.X_test[:20])]))
        wait_until(lambda: late.scorer.model_job == "rm", 10, "a device joining later gets the model")
        time.sleep(1.5)  # published again meanwhile
        assert len(got) >= 2 and loads == []  # an agent that has the version does not load it again
    finally:
        client.disconnect()
        client.loop_stop()
