"""A transport-map job over a real broker (Mosquitto when installed): a fleet whose traffic drifted as a whole
learns one map onto the promoted mixture (from the quantile start: a histogram phase); the deployment computes
what the simulation computes, the mapped mixture is promoted and the agents score with it; an upload no device's
records could give is refused with its reason."""

from __future__ import annotations

import numpy as np

from models.otmap.field import MappedDetector
from models.otmap.fleet import simulate_fleet_map
from store.db import ModelVersion, Round, unpack
from tests.integration.conftest import parts_for, wait_until
from tests.integration.test_loopback import OTMAP_SMALL, drifted
from wire.model import detector_from_envelope, stored_envelope

N = 4


def test_deployed_transport_map_equals_the_simulations_and_agents_score_with_it(broker, coordinator, fleet, traffic):
    data, split = traffic
    features = data.feature_names
    parts = parts_for(split, N)
    for i, p in enumerate(parts):
        fleet.add(f"a-{i}", p, features)
    wait_until(lambda: len(coordinator.online_devices("gmm")) == N, what="fleet A online")
    coordinator.create_job("a", "gmm", "fedem", {"features": features, "rounds": 3, "fraction": 0.5, "seed": 0,
                                                 "min_agents": N, "deadline": 10.0,
                                                 "algorithm_params": {"components": 3}})
    wait_until(lambda: coordinator.job_status("a") in ("finished", "failed"), 60, "job a")
    assert coordinator.job_status("a") == "finished"
    for i in range(N):  # fleet A leaves; fleet B, the same traffic after a drift, takes its place
        fleet.stop(f"a-{i}")
    wait_until(lambda: not coordinator.online_devices(), 20, "fleet A offline")
    moved = drifted(parts, features)
    for i, p in enumerate(moved):
        fleet.add(f"b-{i}", p, features)
    wait_until(lambda: len(coordinator.online_devices("otmap")) == N, what="fleet B online for otmap jobs")

    rounds, fraction, seed = 3, 0.5, 4
    coordinator.create_job("b", "otmap", "fedmm-ot", {"features": features, "rounds": rounds, "fraction": fraction,
                                                      "seed": seed, "min_agents": N, "deadline": 10.0,
                                                      "target_records": 512, "algorithm_params": OTMAP_SMALL})
    wait_until(lambda: coordinator.job_status("b") in ("finished", "failed"), 60, "job b")
    assert coordinator.job_status("b") == "finished"
    with coordinator.sessions() as s:
        base_mv = s.query(ModelVersion).filter_by(job_id="a").one()
        mv = s.query(ModelVersion).filter_by(job_id="b").one()
        stored, info, promoted = unpack(mv.arrays), dict(mv.info), mv.promoted
        rounds_run = s.query(Round).filter_by(job_id="b").order_by(Round.round).all()
    assert [r.phase for r in rounds_run] == ["stats", "histogram"] + ["train"] * rounds
    assert all(r.metrics["dropouts"] == 0 and "influence" not in r.metrics for r in rounds_run)
    assert promoted and info["base_model"] == base_mv.id

    base = detector_from_envelope(stored_envelope("a", 1, unpack(base_mv.arrays), dict(base_mv.info)))
    mapped, broadcast = simulate_fleet_map(base, moved, "fedmm-ot", rounds, fraction, seed, OTMAP_SMALL, 512)
    np.testing.assert_allclose(stored["omega"], broadcast["omega"], atol=1e-6)

    # the agents load the mapped mixture as their scoring model
    agent = fleet.agents["b-0"]
    wait_until(lambda: isinstance(agent.scorer.detector, MappedDetector), 20, "the mapped model on an agent")
    np.testing.assert_allclose(agent.scorer.detector.omega, stored["omega"])
    # with the quantile start (the default) the model scores as the simulation's, and the agents move records as
    # it does before scoring (their mixture then adapts to the traffic it sees: its scores are its own)
    X = np.vstack(moved)
    det = detector_from_envelope(stored_envelope("b", 1, stored, info))
    assert isinstance(det, MappedDetector) and det.start is not None and agent.scorer.detector.start is not None
    np.testing.assert_allclose(det.score_samples(X), mapped.score_samples(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(agent.scorer.detector.transform(X), mapped.transform(X), rtol=1e-6, atol=1e-6)
