"""False-positive feedback end to end (issue 24, point 3), on a real broker with a real coordinator and agent: an
analyst marks an alert through the API, the coordinator sends the device the marked scores, and the agent raises
its threshold so that the record would no longer alert, never above its cap (twice the federation's threshold for
a PCA model), reports the effect (shown by the API), keeps it over a restart and re-applies it to a new model from
the record's kept features. Only with consent do marked records join the training buffer; a feedback message that
is not one is refused with its reason and changes nothing."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from edge_agent.sources import Batch
from models.detection.threshold import above_rounding
from models.pca.detector import PCADetector
from store.db import Alert
from tests.api.conftest import bearer
from tests.integration.conftest import wait_until
from tests.integration.test_model_refusal import NAMES, publish_model
from wire.feedback import Feedback, feedback_topic
from wire.messages import envelope


def publish_raw(url: str, topic: str, payload: bytes) -> None:
    from wire.mqtt import make_client

    client, b = make_client(f"test-fb-{time.monotonic_ns()}", url, clean_session=True)
    client.connect(b.host, b.port)
    client.loop_start()
    client.publish(topic, payload, qos=1, retain=True).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


class Gate:
    """A traffic source that yields each batch the test puts in, and "nothing now" otherwise."""

    def __init__(self):
        self.batches: list[Batch] = []
        self.lock = threading.Lock()

    def put(self, X: np.ndarray, tag: str) -> None:
        with self.lock:
            self.batches.append(Batch(NAMES, X, text={"uid": np.array([f"{tag}{i}" for i in range(len(X))],
                                                                      dtype=object)}))

    def __iter__(self):
        while True:
            with self.lock:
                b = self.batches.pop(0) if self.batches else None
            yield b


@pytest.fixture
def soc(coordinator):
    url = coordinator.engine.url.render_as_string(hide_password=False)
    app = create_app(Settings(db_url=url, cookie_secure=False))
    with app.state.sessions.begin() as s:
        keys = {"admin": create_key(s, "admin", "alice@soc"), "viewer": create_key(s, "viewer")}
    yield TestClient(app), bearer(keys["admin"]), bearer(keys["viewer"])
    app.state.sessions.kw["bind"].dispose()


def setting(rng):
    normal = np.abs(rng.normal(100, 10, (2000, 3)))
    det = PCADetector(rank=1).fit(normal, NAMES)
    t = det.threshold_
    candidates = np.abs(rng.normal(100, 10, (4000, 3))) * np.array([1.0, 1.25, 1.0])
    s = det.score_samples(candidates)
    fp = candidates[(s > 1.2 * t) & (s < 1.6 * t)][:1]  # a false positive: flagged, within the cap (2 t)
    absurd = np.array([[100.0, 1e6, 100.0]])  # a record scoring far past any cap
    assert len(fp) == 1 and det.score_samples(absurd)[0] > 100 * t
    return normal, det, fp, absurd


def alerts_of(coordinator, device: str) -> list[Alert]:
    with coordinator.sessions() as s:
        return s.query(Alert).filter_by(device_id=device).order_by(Alert.score).all()


def effect(client, headers, fid: str):
    shown = {f["id"]: f for f in client.get("/api/v1/feedback", headers=headers).json()}
    return shown[fid]["effect"]


def test_marking_an_alert_raises_the_device_threshold_within_its_cap(broker, coordinator, fleet, soc):
    client, admin, viewer = soc
    normal, det, fp, absurd = setting(np.random.default_rng(3))
    t = det.threshold_
    gate = Gate()
    agent = fleet.add("fb-1", normal[:400], NAMES, source=iter(gate), alert_burst=100)
    wait_until(lambda: "fb-1" in coordinator.online_devices(), what="agent online")
    publish_model(broker.url, det, 1)
    wait_until(lambda: agent.scorer.model_version == 1, what="model 1")
    base = agent.scorer.detector.threshold_
    gate.put(np.vstack([fp, absurd]), "A")
    wait_until(lambda: len(alerts_of(coordinator, "fb-1")) == 2, what="two alerts stored")
    fp_alert, absurd_alert = alerts_of(coordinator, "fb-1")
    assert fp_alert.score == pytest.approx(det.score_samples(fp)[0])
    seen = agent.buffer.seen

    refused = client.post("/api/v1/feedback", json={"alert": fp_alert.id, "reason": "x"}, headers=viewer)
    assert refused.status_code == 403
    first = client.post("/api/v1/feedback", json={"alert": fp_alert.id, "reason": "the NAS backup"}, headers=admin)
    assert first.status_code == 201, first.text
    first = first.json()
    raised = above_rounding(fp_alert.score)  # the marked score, past the rounding of scoring it again
    wait_until(lambda: agent.scorer.detector.threshold_ == raised, 15, "threshold raised to the marked score")
    assert not det.score_samples(fp)[0] > agent.scorer.detector.threshold_  # the record would not alert again
    wait_until(lambda: effect(client, viewer, first["id"]) is not None, 15, "effect reported")
    e = effect(client, viewer, first["id"])
    assert e["before"] == pytest.approx(base) and e["after"] == raised and not e["capped"]
    assert e["cap"] == pytest.approx(2 * t) and e["records"] == 1 and e["model"] == "m:1"
    gate.put(fp, "B")  # the same traffic again: no alert
    wait_until(lambda: agent.counters["records"] == 3, what="scored")
    time.sleep(0.5)
    assert len(alerts_of(coordinator, "fb-1")) == 2

    # one action on an absurd score moves the threshold to the cap, no further, and says so
    second = client.post("/api/v1/feedback", json={"alert": absurd_alert.id, "reason": "test traffic"},
                         headers=admin).json()
    wait_until(lambda: agent.scorer.detector.threshold_ == pytest.approx(2 * t), 15, "threshold at the cap")
    wait_until(lambda: effect(client, viewer, second["id"]) is not None, 15, "effect reported")
    e = effect(client, viewer, second["id"])
    assert e["capped"] and e["after"] == pytest.approx(2 * t) and e["before"] == raised
    gate.put(absurd, "C")  # still flagged: the cap keeps the detector on
    wait_until(lambda: len(alerts_of(coordinator, "fb-1")) == 3, what="the absurd record alerts again")
    # no consent: nothing joined the training buffer, and the API says so
    assert agent.buffer.seen == seen
    assert "did not consent" in client.get("/api/v1/feedback", headers=viewer).json()[0]["training"]

    # undone: the threshold comes back down to what the remaining action sets
    client.delete(f"/api/v1/feedback/{second['id']}", headers=admin).raise_for_status()
    wait_until(lambda: agent.scorer.detector.threshold_ == raised, 15, "threshold back after undo")

    # a restart keeps it; a new model gets it again, from the record's kept features scored under that model
    fleet.stop("fb-1")
    agent = fleet.add("fb-1", None, NAMES, source=iter(gate), alert_burst=100)
    assert agent.scorer.detector.threshold_ == raised  # before the broker even delivers it
    det2 = PCADetector(rank=1).fit(normal[::-1][:1500] * 1.01, NAMES)
    publish_model(broker.url, det2, 2)
    wait_until(lambda: agent.scorer.model_version == 2, what="model 2")
    again = max(agent.scorer.base_threshold, det2.score_samples(fp)[0])
    assert agent.scorer.detector.threshold_ == pytest.approx(min(again, 2 * det2.threshold_))
    wait_until(lambda: (effect(client, viewer, first["id"]) or {}).get("model") == "m:2", 15, "model 2's effect")


def test_with_consent_marked_records_join_the_training_buffer(broker, coordinator, fleet, soc):
    client, admin, viewer = soc
    normal, det, fp, _ = setting(np.random.default_rng(4))
    gate = Gate()
    agent = fleet.add("fb-2", normal[:400], NAMES, source=iter(gate), alert_burst=100, feedback_training=True)
    wait_until(lambda: "fb-2" in coordinator.online_devices(), what="agent online")
    publish_model(broker.url, det, 1)
    wait_until(lambda: agent.scorer.model_version == 1, what="model 1")
    gate.put(fp, "A")
    wait_until(lambda: len(alerts_of(coordinator, "fb-2")) == 1, what="alert stored")
    seen = agent.buffer.seen
    fb = client.post("/api/v1/feedback", json={"alert": alerts_of(coordinator, "fb-2")[0].id, "reason": "ok"},
                     headers=admin).json()
    wait_until(lambda: (effect(client, viewer, fb["id"]) or {}).get("trained") == 1, 15, "trained reported")
    assert agent.buffer.seen == seen + 1
    assert np.allclose(agent.buffer.X[-1], fp[0], rtol=1e-6)  # as a normal record, in the buffer's columns
    assert "joined the device's next training job" in client.get("/api/v1/feedback", headers=viewer).json()[0][
        "training"]


def test_a_feedback_message_that_is_not_one_is_refused_with_its_reason(broker, coordinator, fleet, caplog):
    _, det, _, _ = setting(np.random.default_rng(5))
    agent = fleet.add("fb-3", None, NAMES, source=iter(Gate()))
    wait_until(lambda: "fb-3" in coordinator.online_devices(), what="agent online")
    publish_model(broker.url, det, 1)
    wait_until(lambda: agent.scorer.model_version == 1, what="model 1")
    caplog.set_level(logging.WARNING, "fedsentry.agent")
    bad = Feedback(actions=["a" * 32], models=["m:1"], scores=np.array([-5.0, 1e3]), action=np.array([0, 0]),
                   model=np.array([0, 0]))
    publish_raw(broker.url, feedback_topic("fb-3"), envelope(bad, "", 0, "coordinator").encode())
    wait_until(lambda: agent.counters["rejected"] == 1, 10, "refused")
    assert "scores must be positive" in caplog.text and agent.scorer.detector.threshold_ == det.threshold_
    short = Feedback(actions=["a" * 32], models=["m:1"], scores=np.array([1e3]), action=np.array([0, 0]),
                     model=np.array([0]))
    publish_raw(broker.url, feedback_topic("fb-3"), envelope(short, "", 0, "coordinator").encode())
    wait_until(lambda: agent.counters["rejected"] == 2, 10, "refused")
    assert "1 scores but 2 action" in caplog.text and agent.scorer.detector.threshold_ == det.threshold_
