"""A ridge per component, chosen from the fleet's held-out records (models.mixture.component_ridges)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from models.jobspec import SettingError
from models.mixture.component_ridges import assemble, choose, heldout_sums, volume_choice
from models.mixture.fedem import FedEM
from models.mixture.gmm import hard_stats, m_step
from models.mixture.simulator import simulate_mixture
from models.mixture.spec import MixtureJobSpec

RIDGES = [1e-4, 0.3]


def two_kinds(seed: int, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Records of two kinds far apart, labelled: a few exact values on a line with a rare neighbour one step off it
    (a tight covariance fits the repeats, a broad one the neighbour), and a broad cloud (any ridge fits it)."""
    rng = np.random.default_rng(seed)
    tight = np.column_stack([rng.integers(0, 3, n), np.zeros(n)])
    tight[: n // 20, 1] = 1.0  # the rare neighbour
    broad = rng.normal(10, 1.0, (n, 2))
    return np.vstack([tight, broad]), np.repeat([0, 1], n)


def candidates(X: np.ndarray, labels: np.ndarray) -> list:
    stats = hard_stats(X, labels, 2)
    return [m_step(*stats, r) for r in RIDGES]


def test_a_device_sends_each_components_count_and_its_records_log_densities():
    X, labels = two_kinds(0)
    mixtures = candidates(X, labels)
    counts, sums = heldout_sums(X, mixtures)
    np.testing.assert_array_equal(counts, [400, 400])
    for m, row in zip(mixtures, sums):
        cov = [np.linalg.inv(L @ L.T) for L in m.prec_chol]
        expected = [multivariate_normal(m.means[k], cov[k]).logpdf(X[labels == k]).sum() for k in range(2)]
        np.testing.assert_allclose(row, expected, rtol=1e-9)


def test_each_component_keeps_the_ridge_its_held_out_records_favour():
    """Fitted on the repeats alone, the tight component's held-out records include the neighbour one step off, which
    a ridge of 1e-4 makes wildly unlikely: that component takes the broad ridge. The broad cloud's likelihood barely
    moves with the ridge and is highest at the smaller."""
    X, labels = two_kinds(1)
    fit = X.copy()
    fit[labels == 0, 1] = 0.0  # training saw no neighbour
    mixtures = candidates(fit, labels)
    held, _ = two_kinds(2)
    counts, sums = heldout_sums(held, mixtures)
    choice = choose(counts, sums, least=5)
    np.testing.assert_array_equal(choice, [1, 0])
    mixture = assemble(mixtures[0], mixtures, choice)
    np.testing.assert_array_equal(mixture.prec_chol[0], mixtures[1].prec_chol[0])
    np.testing.assert_array_equal(mixture.prec_chol[1], mixtures[0].prec_chol[1])


def test_a_component_with_too_few_held_out_records_takes_the_fleets_choice():
    counts = np.array([50.0, 2.0, 30.0])
    sums = np.array([[-10.0, -1.0, -50.0], [-20.0, -9.0, -5.0]])  # the fleet sums -61 vs -34: the second
    np.testing.assert_array_equal(choose(counts, sums, least=5), [0, 1, 1])


def test_the_volume_criterion_takes_the_least_ellipsoid_that_holds_the_records():
    """The broad cloud holds the same share in about the same volume at either ridge; the repeats with their neighbour
    need a far larger Mahalanobis radius at 1e-4 than the broad ridge's ellipsoid costs."""
    X, labels = two_kinds(3)
    fit = X.copy()
    fit[labels == 0, 1] = 0.0
    mixtures = candidates(fit, labels)
    distances = np.stack([(((X - m.means[labels])[:, None, :] @ m.prec_chol[labels])[:, 0] ** 2).sum(axis=1)
                          for m in mixtures])
    np.testing.assert_array_equal(volume_choice(labels, distances, mixtures, 0.985, least=5), [1, 0])


def fleet(seed: int, devices: int = 10) -> list[np.ndarray]:
    return [two_kinds(seed * 100 + i, 200)[0] for i in range(devices)]


def test_the_simulator_chooses_and_counts_the_phase():
    normal = np.vstack(fleet(7, 3))
    run = simulate_mixture(fleet(0), normal, np.zeros(len(normal)), ["a", "b"], rounds=10, fraction=0.5,
                           params={"components": 4, "component_ridges": RIDGES})
    plain = simulate_mixture(fleet(0), normal, np.zeros(len(normal)), ["a", "b"], rounds=10, fraction=0.5,
                             params={"components": 4})
    assert sum(run["component_ridges"]) == 4
    assert run["upload_bytes_per_device_round"] != plain["upload_bytes_per_device_round"]  # one more phase


def test_a_job_refuses_component_ridges_and_they_exclude_further_ridges():
    with pytest.raises(SettingError, match="component_ridges"):
        MixtureJobSpec.from_dict({"features": ["a", "b"], "algorithm_params": {"component_ridges": RIDGES}})
    with pytest.raises(ValueError, match="component_ridges"):
        FedEM(2, ridges=[0.1], component_ridges=RIDGES)
