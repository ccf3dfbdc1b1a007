"""A Gaussian-mixture job over a real broker: the deployment computes what the simulator computes, agents
score with the promoted mixture and their alerts carry its explanations."""

from __future__ import annotations

import numpy as np
import pytest

from models.mixture.simulator import simulate_mixture
from store.db import ModelVersion, Round, unpack
from tests.integration.conftest import late_agent_alerts, parts_for, wait_until

N = 5


def test_deployed_mixture_equals_the_simulators_and_alerts_explain(broker, coordinator, fleet, traffic):
    data, split = traffic
    parts = parts_for(split, N)
    # one device whose traffic drifted: its held-out records (every fifth) are noisy, so its threshold is its own
    parts[1] = parts[1].copy()
    parts[1][4::5] *= np.exp(np.random.default_rng(0).normal(0, 1.0, parts[1][4::5].shape))
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    wait_until(lambda: len(coordinator.online_devices("gmm")) == N, what="agents online for gmm jobs")
    params = {"components": 4, "reg": 1e-2}
    coordinator.create_job("g1", "gmm", "fedem", {"features": data.feature_names, "rounds": 6, "fraction": 0.6,
                                                  "seed": 0, "min_agents": N, "deadline": 10.0,
                                                  "algorithm_params": params})
    wait_until(lambda: coordinator.job_status("g1") in ("finished", "failed"), 60, "job g1")
    assert coordinator.job_status("g1") == "finished"
    with coordinator.sessions() as s:
        mv = s.query(ModelVersion).filter_by(job_id="g1").one()
        stored, threshold = unpack(mv.arrays), mv.info["threshold"]
        rounds = s.query(Round).filter_by(job_id="g1").order_by(Round.round).all()
    assert [r.phase for r in rounds] == ["stats", "seed"] + ["train"] * 6 + ["threshold"]
    assert all(r.metrics["dropouts"] == 0 and r.metrics.get("implausible_uploads", 0) == 0 for r in rounds)

    sim = simulate_mixture(parts, split.X_test, split.y_test, data.feature_names, "fedem", 6, 0.6, seed=0,
                           params=params)
    m = sim["detector"].mixture_
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    np.testing.assert_allclose(stored["prec_chol"], m.prec_chol, rtol=1e-6, atol=1e-6)
    assert abs(threshold - sim["threshold"]) < 1e-6 * sim["threshold"]
    assert abs(mv.info["holdout_nll"] - sim["holdout_nll"]) < 1e-4 * (1 + abs(sim["holdout_nll"]))

    # each agent shrinks its own threshold toward the fleet's from its held-out records, as the simulator does
    own = sim["device_threshold"]["each"]
    assert own[1] == max(own) > threshold  # the drifted device's own threshold (within the published tail)
    for i in range(N):
        agent = fleet.agents[f"dev-{i}"]
        wait_until(lambda a=agent: a.scorer.model_job == "g1", 10, f"dev-{i} loads the model")
        assert agent.scorer.federation_threshold == pytest.approx(threshold, rel=1e-12)
        assert agent.scorer.detector.threshold_ == pytest.approx(own[i], rel=1e-9)
        # and knows the range of each feature it trained on, within which its explanations' expected values lie
        lo, hi = agent.scorer.detector.seen_
        np.testing.assert_allclose(lo, parts[i].min(axis=0), rtol=1e-6)
        np.testing.assert_allclose(hi, parts[i].max(axis=0), rtol=1e-6)

    # agents score with the promoted mixture; a late agent's alerts carry the responsible component's
    # explanation: observed and expected values in original units
    a = late_agent_alerts(fleet, coordinator, data.feature_names, split.X_test[split.y_test == 1][:200], "late-g",
                          "MixtureDetector")
    top = a.explanation[0]
    assert top["feature"] in data.feature_names and np.isfinite(top["expected"]) and "component" in top
