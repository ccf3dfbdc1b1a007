"""Deterministic annealing in FedEM's k-means rounds (`anneal`, models.mixture.gmm.soft_stats)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from models.mixture.fedem import ANNEAL_FLOOR, FedEM
from models.mixture.gmm import hard_stats, nearest, soft_stats


def test_cold_assignment_is_k_means_and_hot_assignment_shares_records_evenly():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    centres = rng.normal(size=(4, 3))
    hard = hard_stats(X, nearest(X, centres), 4)
    for got, want in zip(soft_stats(X, centres, 1e-6), hard):
        np.testing.assert_allclose(got, want, atol=1e-9)
    R, S1, _ = soft_stats(X, centres, 1e6)
    np.testing.assert_allclose(R, np.full(4, 75.0), rtol=1e-3)  # every record a quarter to each centre
    np.testing.assert_allclose(S1, np.tile(X.sum(axis=0) / 4, (4, 1)), rtol=1e-3, atol=1e-6)


def test_the_temperature_cools_each_round_and_the_rounds_end_as_k_means():
    alg = FedEM(3, components=2, anneal=4.0)
    temps = [alg.temperature(t) for t in range(200)]
    assert temps[0] == 4.0 and temps[1] == pytest.approx(3.6)
    assert all(a > b or b == 0 for a, b in pairwise(temps))
    assert temps[-1] == 0.0 and min(t for t in temps if t > 0) >= ANNEAL_FLOOR
    with pytest.raises(ValueError, match="anneal"):
        FedEM(3, anneal=-1.0)


def test_the_broadcast_carries_the_temperature_and_the_devices_share_their_records():
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(0, 1, (200, 2)), rng.normal(3, 1, (200, 2))])
    alg = FedEM(2, components=2, anneal=2.0, splits=0)
    server, broadcast = alg.init_server(2, rng)
    data = {"X": np.array([X[::2], X[1::2]], dtype=object), "seed": np.array([1, 2])}
    state = alg.init_clients(data, broadcast)
    for _ in range(2):  # seeding, then a k-means round
        state, up = alg.client_update(state, data, broadcast)
        server, broadcast = alg.server_update(server, np.arange(2), up, np.array([0.5, 0.5]))
        assert float(broadcast["temperature"]) > 0
    state, up = alg.client_update(state, data, broadcast)
    hard = hard_stats(X[::2], nearest(X[::2], broadcast["means"]), 2)[0] / len(X[::2])
    assert not np.allclose(up["R"][0], hard, atol=1e-3)  # shared among the means, not k-means' counts
    assert up["R"][0].sum() == pytest.approx(1.0, abs=1e-6)


def test_a_job_and_private_mode_refuse_annealing():
    from models.jobspec import SettingError
    from models.mixture.simulator import simulate_mixture
    from models.mixture.spec import MixtureJobSpec

    with pytest.raises(SettingError, match="anneal"):
        MixtureJobSpec.from_dict({"features": ["a", "b"], "algorithm_params": {"anneal": 4.0}})
    parts = [np.random.default_rng(i).normal(size=(100, 2)) for i in range(4)]
    with pytest.raises(ValueError, match="anneal"):
        simulate_mixture(parts, parts[0], np.zeros(100), ["a", "b"], rounds=2, fraction=0.5,
                         params={"components": 2, "anneal": 4.0}, private=True)
