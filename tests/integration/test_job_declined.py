"""A job its agents cannot take part in fails with their reasons (issue 28): a job naming a feature the
agents lack used to fail with 'no agent answered the statistics phase', the reason only in the agents' logs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from store.db import Job
from tests.integration.conftest import wait_until

NAMES = ["duration", "src_bytes", "dst_bytes"]


@pytest.mark.alone  # a wall-clock bound
def test_a_job_whose_features_the_agents_lack_fails_at_once_with_their_reason(coordinator, fleet):
    rng = np.random.default_rng(0)
    for i in range(3):
        fleet.add(f"dev-{i}", np.abs(rng.normal(100, 10, (200, 3))), NAMES)
    wait_until(lambda: len(coordinator.online_devices("gmm")) == 3, what="agents online")
    t0 = time.monotonic()
    coordinator.create_job("lacks", "gmm", "fedem", {"features": ["duration", "src_bytes", "service_port"],
                                                     "min_agents": 3, "deadline": 30})
    wait_until(lambda: coordinator.job_status("lacks") == "failed", 20, "the job failed")
    assert time.monotonic() - t0 < 20  # every agent declined: the round closes before its 30 s deadline
    with coordinator.sessions() as s:
        error = s.get(Job, "lacks").error
    assert "no agent answered the statistics phase" in error
    assert "agents that declined said: dev-0, dev-1, dev-2: input lacks the model's features: service_port" in error
