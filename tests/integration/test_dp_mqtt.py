"""Differential privacy in PCA and gmm jobs (issue 23, point 4) over a real broker with in-process agents, central
and distributed: the model, the threshold and the budget spent equal `simulate_pca(..., dp=...)` or
`simulate_mixture(..., dp=...)` with the same seed, and the API's job detail shows the budget spent. The noise
streams are keyed as the simulator's for the comparison (a device keys its own with a secret, the coordinator
likewise)."""

from __future__ import annotations

import numpy as np
import pytest

from models.mixture.simulator import simulate_mixture
from models.pca.simulator import simulate_pca
from models.private.accounting import Budget
from models.private.dp import device_key
from tests.integration.conftest import coordinator_result, parts_for, wait_until
from tests.integration.test_dp_job import assert_same_budget

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")
pytest.importorskip("dp_accounting", reason="differential privacy's budget needs dp-accounting (the dev extra)")

N, RANK, SEED, EPSILON = 5, 3, 1, 4.0


def keyed_fleet(coordinator, fleet, traffic, monkeypatch) -> list:
    """N agents online with the traffic's partitions, their noise streams (and the coordinator's central one) keyed
    as the simulator's; the partitions."""
    import coordinator.noisy_detector as noisy
    from edge_agent.participant import Participant

    monkeypatch.setattr(Participant, "noise_key", lambda self, job: device_key(SEED, int(self.id.split("-")[1])))
    monkeypatch.setattr(noisy, "central_key", lambda: [SEED, 4242])
    data, split = traffic
    parts = parts_for(split, N)
    for i, p in enumerate(parts):
        fleet.add(f"dev-{i}", p, data.feature_names)
    wait_until(lambda: len(coordinator.online_devices()) == N, what="agents online")
    return parts


def finished_job(coordinator, job: str, kind: str, algorithm: str, settings: dict) -> tuple[dict, dict]:
    """Run a job with the budget EPSILON over the N agents to its end; its model version's arrays and info."""
    coordinator.create_job(job, kind, algorithm, {**settings, "dp_epsilon": EPSILON, "min_agents": N,
                                                  "deadline": 3.0})
    done = coordinator_result(coordinator, job, 90)
    return done.arrays, done.info


@pytest.mark.parametrize("private", [True, False], ids=["distributed", "central"])
def test_a_dp_pca_job_over_mqtt_equals_the_simulator_and_the_api_shows_its_budget(broker, coordinator, fleet, traffic,
                                                                                  monkeypatch, private):
    data, split = traffic
    parts = keyed_fleet(coordinator, fleet, traffic, monkeypatch)
    arrays, info = finished_job(coordinator, "d1", "pca", "fedmm", {"features": data.feature_names, "rank": RANK,
                                                                 "seed": SEED, "private": private})
    Z = arrays["Z"]
    sim = simulate_pca(parts, split.X_test, split.y_test, data.feature_names, rank=RANK, seed=SEED, private=private,
                       dp=Budget(EPSILON))
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    assert_same_budget(info["dp"], sim["dp"], skip=("clipped_uploads",) if private else ())

    assert_api_shows_the_budget(coordinator, "d1", info["dp"], private)


def assert_api_shows_the_budget(coordinator, job: str, dp: dict, private: bool) -> None:
    """The API's job detail shows the budget the job's model version spent."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.security import create_key
    from api.settings import Settings

    with coordinator.sessions.begin() as s:
        key = {"Authorization": f"Bearer {create_key(s, 'viewer')}"}
    with TestClient(create_app(Settings(cookie_secure=False), sessions=coordinator.sessions)) as client:
        detail = client.get(f"/api/v1/jobs/{job}", headers=key).json()
    assert detail["dp"] == dp and detail["dp"]["noise"] == ("distributed" if private else "central")


@pytest.mark.parametrize("private", [True, False], ids=["distributed", "central"])
def test_a_dp_gmm_job_over_mqtt_equals_the_simulator_and_the_api_shows_its_budget(broker, coordinator, fleet, traffic,
                                                                                  monkeypatch, private):
    """The summed FedEM's seeding and EM rounds as noisy sums (a few devices, rounds and components: quick)."""
    data, split = traffic
    parts = keyed_fleet(coordinator, fleet, traffic, monkeypatch)
    rounds, fraction, params = 3, 0.6, {"components": 3}
    stored, info = finished_job(coordinator, "g1", "gmm", "fedem", {
        "features": data.feature_names, "seed": SEED, "rounds": rounds, "fraction": fraction,
        "algorithm_params": params, "private": private})
    sim = simulate_mixture(parts, split.X_test, split.y_test, data.feature_names, "fedem", rounds, fraction,
                           seed=SEED, params=params, private=private, dp=Budget(EPSILON))
    m = sim["detector"].mixture_
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-6)
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    np.testing.assert_allclose(stored["prec_chol"], m.prec_chol, rtol=1e-6, atol=1e-6)
    assert info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    assert_same_budget(info["dp"], sim["dp"], skip=("clipped_uploads",) if private else ())
    assert info["dp"]["sums"] == {"all_devices": 4 + sim["all_device_rounds"], "sampled": rounds}
    assert_api_shows_the_budget(coordinator, "g1", info["dp"], private)
