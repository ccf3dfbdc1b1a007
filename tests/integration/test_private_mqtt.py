"""A private PCA job (issue 23) over a real broker with in-process agents: the secure sums' steps as job rounds,
each device's routed shares on its own topic, a device that leaves right after its masked upload; the model equals
the simulator's private mode with the same seed (whose dropouts also leave after uploading)."""

from __future__ import annotations

import numpy as np
import pytest

from models.pca.simulator import simulate_pca
from store.db import JobState, ModelVersion, Round, unpack
from tests.integration.conftest import parts_for, wait_until

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")

N, RANK, SEED = 5, 3, 1


def test_a_private_pca_job_over_mqtt_equals_the_simulators_private_mode(broker, coordinator, fleet, traffic):
    data, split = traffic
    parts = parts_for(split, N)
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    leaver = fleet.agents["dev-3"]
    participant = leaver.participants["pca"]
    upload = participant.on_routed

    def upload_then_leave(env):  # dev-3 leaves right after its masked upload to the last sum (the threshold's)
        reply = upload(env)
        if "/threshold/" in env.meta["label"]:
            leaver.stop.set()
        return reply

    participant.on_routed = upload_then_leave
    wait_until(lambda: len(coordinator.online_devices()) == N, what="agents online")
    coordinator.create_job("p1", "pca", "fedmm", {"features": data.feature_names, "rank": RANK, "seed": SEED,
                                                  "private": True, "min_agents": N, "deadline": 3.0})
    wait_until(lambda: coordinator.job_status("p1") in ("finished", "failed"), 60, "job p1")
    with coordinator.sessions() as s:
        rounds = s.query(Round).filter_by(job_id="p1").order_by(Round.round).all()
        assert coordinator.job_status("p1") == "finished", [r.metrics for r in rounds[-2:]]
        mv = s.query(ModelVersion).filter_by(job_id="p1").one()
        Z, threshold = unpack(mv.arrays)["Z"], mv.info["threshold"]
        state = s.get(JobState, "p1")
        assert not [k for k in unpack(state.server) if k.startswith("secagg.")]
    assert [r.phase for r in rounds][:5] == ["stats", "mean:advertise", "mean:share", "mean:upload", "mean:unmask"]
    last = rounds[-1]  # the threshold's unmask: dev-3 did not answer, its upload counted
    assert last.phase == "threshold:unmask" and last.metrics["dropouts"] == 1 and last.metrics["survivors"] == N
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, rank=RANK, seed=SEED, private=True,
                       dropout=1 / 3)
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert threshold == pytest.approx(sim["threshold"], rel=1e-6)
    wait_until(lambda: all(a.scorer.detector is not None for n, a in fleet.agents.items() if n != "dev-3"),
               what="model at agents")
