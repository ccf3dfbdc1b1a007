"""A dictionary-learning job over a real broker (Mosquitto when installed): the deployment computes what the
simulator computes, agents score with the promoted dictionary and their alerts name atoms and features."""

from __future__ import annotations

import numpy as np

from models.dictionary.simulator import simulate_dictionary
from store.db import ModelVersion, Round, unpack
from tests.integration.conftest import late_agent_alerts, parts_for, wait_until

N = 5


def test_deployed_dictionary_equals_the_simulators_and_alerts_explain(broker, coordinator, fleet, traffic):
    data, split = traffic
    parts = parts_for(split, N)
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    wait_until(lambda: len(coordinator.online_devices("dict")) == N, what="agents online for dict jobs")
    params = {"atoms": 6, "bits": 8}
    coordinator.create_job("d1", "dict", "fedmm-dl", {"features": data.feature_names, "rounds": 6, "fraction": 0.6,
                                                      "seed": 0, "min_agents": N, "deadline": 10.0,
                                                      "algorithm_params": params})
    wait_until(lambda: coordinator.job_status("d1") in ("finished", "failed"), 60, "job d1")
    assert coordinator.job_status("d1") == "finished"
    with coordinator.sessions() as s:
        mv = s.query(ModelVersion).filter_by(job_id="d1").one()
        stored, threshold = unpack(mv.arrays), mv.info["threshold"]
        rounds = s.query(Round).filter_by(job_id="d1").order_by(Round.round).all()
    assert [r.phase for r in rounds] == ["stats"] + ["train"] * 6 + ["threshold"]
    assert all(r.metrics["dropouts"] == 0 and r.metrics.get("implausible_uploads", 0) == 0 for r in rounds)

    sim = simulate_dictionary(parts, split.X_test, split.y_test, data.feature_names, "fedmm-dl", 6, 0.6, seed=0,
                              params=params)
    np.testing.assert_allclose(stored["theta"], sim["detector"].components_, atol=1e-6)
    assert abs(threshold - sim["threshold"]) < 1e-6 * sim["threshold"]

    # a late agent scores attacks with the promoted dictionary; its alerts name the atoms and the features
    a = late_agent_alerts(fleet, coordinator, data.feature_names, split.X_test[split.y_test == 1][:200], "late-d",
                          "DictionaryDetector")
    top = a.explanation[0]
    assert top["feature"] in data.feature_names and np.isfinite(top["expected"])
    assert top["atoms"] and all(0 <= x["atom"] < 6 for x in top["atoms"])
