"""A private PCA job (issue 23) over a real broker with in-process agents: the secure sums' steps as job rounds,
each device's routed shares on its own topic, a device that leaves right after its masked upload; the model equals
the simulator's private mode with the same seed (whose dropouts also leave after uploading)."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.job_runner import JobRunner
from models.pca.simulator import simulate_pca
from store.db import JobState, Round, unpack
from tests.integration.conftest import coordinator_result, parts_for, wait_until

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")

N, RANK, SEED = 5, 3, 1


def leave_after_upload(agent) -> None:
    """The agent leaves right after its masked upload to the job's last sum (the threshold's): the simulator's
    dropouts also leave after uploading, so the model stays the simulator's."""
    original = agent._routed

    def routed(env, payload):
        original(env, payload)
        if "/threshold/" in env.meta["label"]:
            agent.stop.set()

    agent._routed = routed


def test_a_private_pca_job_over_mqtt_equals_the_simulators_private_mode(broker, coordinator, fleet, traffic,
                                                                        monkeypatch):
    data, split = traffic
    kept: list[str] = []  # the phases whose answers were stored for a coordinator taking over (round_uploads)
    store = JobRunner.store_uploads
    monkeypatch.setattr(JobRunner, "store_uploads", lambda self: (kept.append(self.phase), store(self))[1])
    parts = parts_for(split, N)
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    leave_after_upload(fleet.agents["dev-3"])
    wait_until(lambda: len(coordinator.online_devices()) == N, what="agents online")
    coordinator.create_job("p1", "pca", "fedmm", {"features": data.feature_names, "rank": RANK, "seed": SEED,
                                                  "private": True, "min_agents": N, "deadline": 3.0})
    done = coordinator_result(coordinator, "p1", 60)
    rounds, Z, threshold = done.rounds, done.arrays["Z"], done.info["threshold"]
    with coordinator.sessions() as s:
        assert not [k for k in unpack(s.get(JobState, "p1").server) if k.startswith("secagg.")]
    assert [r.phase for r in rounds][:5] == ["stats", "mean:advertise", "mean:share", "mean:upload", "mean:unmask"]
    # masked uploads are kept until their round closes; the shares revealed to unmask a sum never are
    assert "mean:upload" in kept and not [p for p in kept if p.endswith(":unmask")]
    last = rounds[-1]  # the threshold's unmask: dev-3 did not answer, its upload counted
    assert last.phase == "threshold:unmask" and last.metrics["dropouts"] == 1 and last.metrics["survivors"] == N
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, rank=RANK, seed=SEED, private=True,
                       dropout=1 / 3)
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert threshold == pytest.approx(sim["threshold"], rel=1e-6)
    wait_until(lambda: all(a.scorer.detector is not None for n, a in fleet.agents.items() if n != "dev-3"),
               what="model at agents")


@pytest.mark.parametrize("proofs", [False, True], ids=["plain", "support-proofs"])
def test_a_private_gmm_job_over_mqtt_survives_a_coordinator_restart_and_equals_the_simulator(broker, fleet, traffic,
                                                                                              tmp_path, proofs):
    """...with the support rows proven 0/1 too (`support_proofs`: the commitments and proofs in the advertisements,
    the kept commitment rows in the saved state across the restart, nothing withheld), as the simulator's."""
    from coordinator.service import Coordinator
    from models.mixture.simulator import simulate_mixture

    data, split = traffic
    parts = parts_for(split, N)
    db = f"sqlite:///{tmp_path}/private.db"
    coordinator = Coordinator(broker.url, db).start()
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    leave_after_upload(fleet.agents["dev-1"])
    wait_until(lambda: len(coordinator.online_devices()) == N, what="agents online")
    rounds, fraction, params = 3, 0.6, {"components": 3}
    job_params = {**params, "support_proofs": True} if proofs else params
    coordinator.create_job("g1", "gmm", "fedem", {"features": data.feature_names, "seed": SEED, "rounds": rounds,
                                                  "fraction": fraction, "algorithm_params": job_params, "private": True,
                                                  "min_agents": N, "deadline": 3.0})
    with coordinator.sessions() as s:  # restarted once the first EM round's shares are routed
        wait_until(lambda: s.query(Round).filter_by(job_id="g1", phase="train:share").count() > 0, 60, "train")
    coordinator.close()
    with coordinator.sessions() as s:
        before_restart = s.query(Round).filter_by(job_id="g1").count()
    coordinator = Coordinator(broker.url, db).start()
    try:
        done = coordinator_result(coordinator, "g1", 60)
        rounds_done, stored, threshold = done.rounds, done.arrays, done.info["threshold"]
        with coordinator.sessions() as s:
            server = unpack(s.get(JobState, "g1").server)
    finally:
        coordinator.close()
    assert [r.round for r in rounds_done] == list(range(len(rounds_done)))  # no round lost, none twice
    assert before_restart < len(rounds_done) - 4  # the restarted coordinator ran the rest (at least the threshold)
    assert rounds_done[-1].metrics["survivors"] == N and rounds_done[-1].metrics["dropouts"] == 1
    sim = simulate_mixture(parts, split.X_test, split.y_test, data.feature_names, "fedem", rounds, fraction,
                           seed=SEED, params=params, private=True, dropout=1 / 3, support_proofs=proofs)
    if proofs:  # every device's commitment row kept (and saved), no sum withheld, as in the simulator
        assert sim["support_proofs"]["sums_withheld"] == 0 and "withheld" not in server
        assert len(server["proofs.kept.ids"]) == N
        assert not [r for r in rounds_done if "refused" in r.metrics.get("influence", {})]
    m = sim["detector"].mixture_
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-6)
    assert threshold == pytest.approx(sim["threshold"], rel=1e-6)
