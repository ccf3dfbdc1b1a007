"""A job needs no hand-typed feature list (issue 28): with none named it trains on the numeric features every
agent taking part announces, stored with the job; agents that share too few make it fail with why."""

from __future__ import annotations

import numpy as np

from store.db import Job
from tests.integration.conftest import wait_until


def test_a_job_without_features_trains_on_those_the_agents_share(coordinator, fleet):
    rng = np.random.default_rng(0)
    names = ["duration", "src_bytes", "dst_bytes", "dst_port"]
    for i in range(3):  # one device has an extra column the others lack: it is left out
        cols = names + (["extra"] if i == 0 else [])
        fleet.add(f"dev-{i}", np.abs(rng.normal(100, 10, (300, len(cols)))), cols)
    wait_until(lambda: len(coordinator.online_devices("gmm")) == 3, what="agents online")
    wait_until(lambda: len(coordinator.announced()) == 3, what="features announced")
    coordinator.create_job("auto", "gmm", "fedem", {"min_agents": 3, "rounds": 3, "fraction": 1.0,
                                                    "algorithm_params": {"components": 4}})
    wait_until(lambda: coordinator.job_status("auto") in ("finished", "failed"), 60, "the job")
    with coordinator.sessions() as s:
        job = s.get(Job, "auto")
        assert job.status == "finished", job.error
        assert job.params["features"] == names


def test_agents_that_share_too_few_features_fail_the_job_with_why(coordinator, fleet):
    rng = np.random.default_rng(1)
    fleet.add("dev-a", np.abs(rng.normal(100, 10, (200, 2))), ["duration", "src_bytes"])
    fleet.add("dev-b", np.abs(rng.normal(100, 10, (200, 2))), ["duration", "dst_bytes"])
    wait_until(lambda: len(coordinator.announced()) == 2, what="features announced")
    coordinator.create_job("few", "pca", "fedmm", {"min_agents": 2, "rank": 1})
    wait_until(lambda: coordinator.job_status("few") == "failed", 30, "the job failed")
    with coordinator.sessions() as s:
        error = s.get(Job, "few").error
    assert "the features the agents share (duration)" in error and "features" in error
