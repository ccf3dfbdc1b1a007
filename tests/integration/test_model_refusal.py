"""A promoted model the device's source cannot supply: the agent refuses it (and never reloads it), keeps
scoring with the last model that worked, and reports both to the coordinator, which keeps them per device;
records read before any model are held and scored once one arrives."""

from __future__ import annotations

import threading
import time

import numpy as np

from edge_agent.sources import Batch
from models.pca.detector import PCADetector
from store.db import Device
from tests.integration.conftest import wait_until
from tests.integration.test_pca_job import publish_as
from wire.model import model_envelope
from wire.protocol import model_topic

NAMES = ["a", "b", "c"]


def publish_model(url: str, det: PCADetector, version: int) -> None:
    from wire.mqtt import make_client

    client, b = make_client(f"test-model-{time.monotonic_ns()}", url, clean_session=True)
    client.connect(b.host, b.port)
    client.loop_start()
    client.publish(model_topic(), model_envelope("m", version, det).encode(), qos=1, retain=True).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


def test_a_model_the_source_cannot_supply_is_refused_and_the_agent_keeps_scoring(broker, coordinator, fleet):
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(100, 10, (400, 3)))
    gate = threading.Event()

    def source():  # a batch each time the test opens the gate; None ("nothing now") otherwise
        i = 0
        while i < 4:
            if gate.is_set():
                gate.clear()
                yield Batch(NAMES, X[100 * i: 100 * (i + 1)])
                i += 1
            else:
                yield None

    agent = fleet.add("dev-r", None, NAMES, source=source())
    wait_until(lambda: "dev-r" in coordinator.online_devices(), what="agent online")
    gate.set()  # read before any model exists: held, not lost
    wait_until(lambda: agent.counters.get("waiting") == 100, what="records held")
    publish_model(broker.url, PCADetector(rank=1).fit(X, NAMES), 1)
    wait_until(lambda: agent.scorer.model_version == 1, what="model 1")
    gate.set()  # the next batch: scored with model 1, and the held one with it
    wait_until(lambda: agent.counters["records"] == 200, what="held and new records scored")
    lacks = PCADetector(rank=1).fit(np.c_[X, X[:, :1]], [*NAMES, "zz"])
    publish_model(broker.url, lacks, 2)
    wait_until(lambda: agent.scorer.model_version == 2, what="model 2 loaded")
    gate.set()
    wait_until(lambda: agent.counters["records"] == 300, what="scored after the refusal")
    assert agent.scorer.model_version == 1 and fleet.threads["dev-r"].is_alive()

    def status():
        with coordinator.sessions() as s:
            return s.get(Device, "dev-r").model_status

    # three status messages in a row (refused; back on model 1, loaded; scoring with it): wait for the last
    wait_until(lambda: (status() or {}).get("refused", {}).get("version") == 2 and status()["status"] == "scoring",
               what="refusal reported, model 1 scoring")
    st = status()
    assert (st["job"], st["version"], st["status"]) == ("m", 1, "scoring")
    assert "lacks the model's features: zz" in st["refused"]["reason"]
    # a refused model is never loaded again, even when it is published again
    publish_model(broker.url, lacks, 2)
    time.sleep(1.0)  # the retained model arrives at once
    assert agent.scorer.model_version == 1
    gate.set()
    wait_until(lambda: agent.counters["records"] == 400, what="last batch")
    assert agent.scorer.model_version == 1
    # a malformed model report in a status message is ignored, the status itself kept
    from wire.protocol import Envelope

    bad = Envelope("status", "", 0, "dev-x", {}, {"online": True, "model": {"status": "scoring", "version": "v"}})
    publish_as(broker.url, "dev-x", "status", bad.encode())
    wait_until(lambda: "dev-x" in coordinator.online_devices(), what="dev-x online")
    with coordinator.sessions() as s:
        assert s.get(Device, "dev-x").model_status is None
