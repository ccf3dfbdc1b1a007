"""Past its alert budget a device groups flagged records into incidents: every flagged record is counted and
stored whole (its flow and explanation, store.records), the counts reach the coordinator within 2 seconds of
scoring (on a timer, not with more traffic), and the API adds an incident's updates up."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edge_agent.sources import Batch
from models.pca.detector import PCADetector
from store.db import Alert, FlaggedRecord
from store.triage import AlertFilter, incidents
from tests.integration.conftest import wait_until
from tests.integration.test_model_refusal import NAMES, publish_model


@pytest.mark.alone  # a wall-clock bound
def test_every_flagged_record_is_counted_in_an_incident_within_two_seconds(broker, coordinator, fleet):
    rng = np.random.default_rng(0)
    normal = np.abs(rng.normal(100, 10, (2000, 3)))
    det = PCADetector(rank=1).fit(normal, NAMES)
    attacks = np.abs(rng.normal(100, 10, (600, 3))) * np.array([1, 30, 0.01])  # breaks the correlation
    flagged = int((det.score_samples(attacks) > det.threshold_).sum())
    assert flagged > 500
    go = threading.Event()

    def source():
        while not go.is_set():
            yield None
        uids = np.array([f"C{i}" for i in range(len(attacks))], dtype=object)
        yield Batch(NAMES, attacks, text={"uid": uids})
        while True:  # no more traffic: incident updates must leave on their own
            yield None

    agent = fleet.add("inc-1", None, NAMES, source=source(), alert_burst=5)
    wait_until(lambda: "inc-1" in coordinator.online_devices(), what="agent online")
    publish_model(broker.url, det, 1)
    wait_until(lambda: agent.scorer.model_version == 1, what="model")
    go.set()
    wait_until(lambda: agent.counters["records"] == len(attacks), what="scored")
    scored = time.monotonic()

    def counted() -> int:
        with coordinator.sessions() as s:
            return sum(a.count for a in s.query(Alert).filter_by(device_id="inc-1"))

    wait_until(lambda: counted() == flagged, 10, "every flagged record counted")
    assert time.monotonic() - scored <= 2.0, time.monotonic() - scored
    with coordinator.sessions() as s:
        rows = s.query(Alert).filter_by(device_id="inc-1").all()
        grouped, _ = incidents(s, AlertFilter(device_prefix="inc-"), 100)
    assert sum(1 for a in rows if a.incident is None) == 5  # the budget: individual alerts
    assert sum(i["count"] for i in grouped) == flagged - 5
    assert all(i["samples"] and i["samples"][0]["uid"].startswith("C") for i in grouped)
    # every record past the budget is kept whole: each flagged uid once, with its explanation
    with coordinator.sessions() as s:
        kept = s.query(FlaggedRecord).filter_by(device_id="inc-1").all()
    alerted = {a.flow["uid"] for a in rows if a.incident is None}
    flagged_uids = {f"C{i}" for i in np.flatnonzero(det.score_samples(attacks) > det.threshold_)}
    assert len(kept) == flagged - 5 and {r.uid for r in kept} == flagged_uids - alerted
    assert all(r.explanation and r.incident_id for r in kept)
