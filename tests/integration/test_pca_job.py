"""Full PCA jobs over a real broker: the deployment computes what the simulator computes."""

from __future__ import annotations

import time

import numpy as np
import pytest

from edge_agent.sources import Batch
from models.core.linalg import subspace_distance
from models.pca.simulator import simulate_pca
from store.db import Alert, ModelVersion, Rejection, Round, unpack
from tests.integration.conftest import parts_for, wait_until
from wire.protocol import Envelope, agent_topic, encode

N = 5


def job_params(data, **kw):
    return {"features": data.feature_names, "rank": 3, "rounds": 8, "fraction": 0.6, "seed": 0,
            "min_agents": N, "deadline": 10.0, **kw}


def launch(coordinator, fleet, data, parts, job_id, algorithm, **params):
    """Agents holding the parts, all online, then a job over them."""
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    wait_until(lambda: len(coordinator.online_devices()) == N, what="agents online")
    coordinator.create_job(job_id, "pca", algorithm, job_params(data, **params))


def finished_model(coordinator, job_id):
    wait_until(lambda: coordinator.job_status(job_id) in ("finished", "failed"), 60, f"job {job_id}")
    assert coordinator.job_status(job_id) == "finished"
    with coordinator.sessions() as s:
        mv = s.query(ModelVersion).filter_by(job_id=job_id).one()
        return unpack(mv.arrays)["Z"], mv.info["threshold"]


@pytest.mark.parametrize(("algorithm", "params"), [("fedpg", {}), ("fedmm", {}), ("fedmm", {"aggregator": "capped"})],
                         ids=["fedpg", "fedmm", "fedmm-capped"])
def test_deployed_model_equals_the_simulators(broker, coordinator, fleet, traffic, algorithm, params):
    data, split = traffic
    parts = parts_for(split, N)
    launch(coordinator, fleet, data, parts, "j1", algorithm, algorithm_params=params)
    Z, threshold = finished_model(coordinator, "j1")
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, algorithm, 3, 8, 0.6, seed=0,
                       params=params)
    # same sampling, same client and server steps: the same subspace and threshold
    assert abs(threshold - sim["threshold"]) < 1e-6 * sim["threshold"]
    from models.pca.baselines import centralized_pca
    from models.pca.simulator import prepare_clients

    clients = prepare_clients(parts, data.feature_names)
    assert abs(subspace_distance(Z, centralized_pca(clients.C, clients.weight, 3)) - sim["subspace_distance"]) < 1e-6
    with coordinator.sessions() as s:
        rounds = s.query(Round).filter_by(job_id="j1").order_by(Round.round).all()
    assert [r.phase for r in rounds] == ["stats"] + ["train"] * 8 + ["threshold"]
    assert all(r.metrics["dropouts"] == 0 for r in rounds)
    # every agent received the promoted model (retained) and scores with it
    wait_until(lambda: all(a.scorer.detector is not None for a in fleet.agents.values()), what="model at agents")


def test_alerts_flow_once_and_a_late_agent_gets_the_model(broker, coordinator, fleet, traffic, tmp_path):
    data, split = traffic
    parts = parts_for(split, N)
    launch(coordinator, fleet, data, parts, "j2", "fedmm", rounds=4)
    finished_model(coordinator, "j2")
    # a device that joins after training gets the retained model at once, then scores attacks
    attacks = split.X_test[split.y_test == 1][:200]
    late = fleet.add("late-1", None, data.feature_names, source=iter([Batch(data.feature_names, attacks)]),
                     wait_for_model=True, alert_burst=1000)
    wait_until(lambda: late.scorer.detector is not None, 10, "late agent model")
    wait_until(lambda: late.counters["records"] == 200, 10, "late agent scoring")
    det = late.scorer.detector
    flagged = int((det.score_samples(attacks) > det.threshold_).sum())
    assert flagged > 20
    wait_until(lambda: late.counters["alerts"] == flagged, 10, "every flagged record alerted")
    with coordinator.sessions() as s:
        wait_until(lambda: s.query(Alert).filter_by(device_id="late-1").count() == flagged, 10, "alerts stored")
        a = s.query(Alert).filter_by(device_id="late-1").first()
        assert a.explanation and a.explanation[0]["feature"] in data.feature_names and a.score > a.threshold
    # the broker redelivers an alert (same id): it is stored once
    env = Envelope("alert", "j2", 1, "late-1", {}, {"id": a.id, "ts": time.time(), "score": 5.0, "threshold": 1.0,
                                                 "explanation": []})
    publish_as(broker.url, "late-1", "alerts", encode(env), times=2)
    time.sleep(0.5)
    with coordinator.sessions() as s:
        assert s.query(Alert).filter_by(device_id="late-1").count() == flagged


def publish_as(url, agent_id, what, payload, times=1):
    from wire.mqtt import make_client

    client, b = make_client(f"test-{agent_id}-{time.monotonic_ns()}", url, clean_session=True)
    client.connect(b.host, b.port)
    client.loop_start()
    for _ in range(times):
        client.publish(agent_topic(agent_id, what), payload, qos=1).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


def test_dropouts_mid_round_do_not_stop_the_job(broker, coordinator, fleet, traffic):
    data, split = traffic
    parts = parts_for(split, N)
    launch(coordinator, fleet, data, parts, "j3", "fedmm", rounds=6, fraction=1.0, deadline=1.0)
    with coordinator.sessions() as s:
        wait_until(lambda: s.query(Round).filter_by(job_id="j3", phase="train").count() >= 2, what="two rounds")
    fleet.stop("dev-0")
    fleet.stop("dev-1")
    Z, _ = finished_model(coordinator, "j3")
    with coordinator.sessions() as s:
        rounds = s.query(Round).filter_by(job_id="j3", phase="train").all()
    assert len(rounds) == 6 and sum(r.metrics["dropouts"] for r in rounds) >= 2
    assert np.isfinite(Z).all()


def test_bad_messages_are_rejected_counted_and_change_nothing(broker, coordinator, fleet, traffic):
    data, split = traffic
    parts = parts_for(split, N)
    launch(coordinator, fleet, data, parts, "j4", "fedpg", rounds=8, fraction=1.0, deadline=4.0)
    with coordinator.sessions() as s:
        wait_until(lambda: s.query(Round).filter_by(job_id="j4", phase="train").count() >= 1, what="a round")
    # dev-2 stops answering, so each round stays open until its deadline: its id's messages below all
    # reach the content checks (rounds of answering agents close in milliseconds)
    fleet.stop("dev-2")
    runner = coordinator.jobs["j4"]
    seen = runner.round
    wait_until(lambda: runner.phase == "train" and runner.round > seen and time.monotonic() - runner.started_at < 1.0,
               20, "a fresh round")
    rnd, d = runner.round, len(data.feature_names)
    good = {"U": np.zeros((d, 3))}
    bad = [
        ("dev-2", b"not an envelope"),
        ("dev-2", encode(Envelope("upload", "j4", rnd, "dev-2", {"U": np.full((d, 3), np.nan)}))),
        ("dev-2", encode(Envelope("upload", "j4", rnd, "dev-2", {"U": np.zeros((3, d))}))),
        ("dev-2", encode(Envelope("upload", "j4", rnd, "dev-2", {"U": np.full((d, 3), 1e9)}))),
        ("dev-2", encode(Envelope("upload", "nojob", rnd, "dev-2", good))),
        ("dev-2", encode(Envelope("upload", "j4", 0, "dev-2", good))),
        ("dev-2", encode(Envelope("upload", "j4", rnd, "dev-3", good))),  # dev-3's id on dev-2's topic
    ]
    for agent, payload in bad:
        publish_as(broker.url, agent, "upload", payload)
    wait_until(lambda: sum(coordinator.rejected.values()) >= len(bad), 10, "rejections")
    assert {"malformed", "non_finite", "shape", "norm", "unknown_job", "stale", "sender"} <= set(coordinator.rejected)
    def stored():
        with coordinator.sessions() as s:
            return {r.reason for r in s.query(Rejection)}

    wait_until(lambda: stored() >= {"malformed", "sender"}, 5, "rejections stored")
    finished_model(coordinator, "j4")  # the job still completes with the honest uploads


def test_the_same_job_on_postgresql(broker, fleet, traffic, postgres_url):
    from coordinator.service import Coordinator

    data, split = traffic
    parts = parts_for(split, N)
    coordinator = Coordinator(broker.url, postgres_url).start()
    try:
        launch(coordinator, fleet, data, parts, "jp", "fedmm")
        _Z, threshold = finished_model(coordinator, "jp")
    finally:
        coordinator.close()
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, "fedmm", 3, 8, 0.6, seed=0)
    assert abs(threshold - sim["threshold"]) < 1e-6 * sim["threshold"]


def test_a_job_above_the_switch_over_the_broker_equals_the_simulators(broker, coordinator, fleet, traffic,
                                                                      monkeypatch):
    """Issue 27, point 5, over MQTT: with the switch (models.core.sampling.LIST_MAX) below the fleet, every round
    message names its devices by a salt and a bound (stored as such); the agents decide for themselves and the model
    is the simulator's for the same fleet (whose clients carry the agents' ids)."""
    from models.core import sampling

    monkeypatch.setattr(sampling, "LIST_MAX", 3)
    data, split = traffic
    parts = parts_for(split, N)
    for name, p in zip(sampling.fleet_names(N), parts):
        fleet.add(name, p, data.feature_names)
    wait_until(lambda: len(coordinator.online_devices()) == N, what="agents online")
    coordinator.create_job("j5", "pca", "fedpg", job_params(data))
    Z, threshold = finished_model(coordinator, "j5")
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, "fedpg", 3, 8, 0.6, seed=0)
    assert abs(threshold - sim["threshold"]) < 1e-6 * sim["threshold"]
    from models.pca.baselines import centralized_pca
    from models.pca.simulator import prepare_clients

    clients = prepare_clients(parts, data.feature_names)
    assert abs(subspace_distance(Z, centralized_pca(clients.C, clients.weight, 3)) - sim["subspace_distance"]) < 1e-6
    with coordinator.sessions() as s:
        rounds = s.query(Round).filter_by(job_id="j5").order_by(Round.round).all()
    assert [r.metrics["sampled"] for r in rounds] == [N] + [3] * 8 + [N] and all(isinstance(r.sampled, dict)
                                                                                  for r in rounds)
    assert all(r.metrics["dropouts"] == 0 for r in rounds)
