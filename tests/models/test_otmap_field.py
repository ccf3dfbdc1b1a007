"""The otmap family's field use (models.otmap.field): samples of a promoted mixture, and a detector scoring records
carried by a map in its standardised space."""

from __future__ import annotations

import numpy as np
import pytest

from models.mixture.detector import MixtureDetector
from models.otmap.field import MappedDetector, mixture_samples
from models.otmap.fleet import target
from models.otmap.icnn import Layout, init


def test_mixture_samples_have_the_mixtures_moments() -> None:
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (400, 2)), rng.normal(6, 0.5, (200, 2))]
    det = MixtureDetector(components=2, log_transform=False).fit(X)
    m = det.mixture_
    Q = mixture_samples(m, 200_000, rng)
    assert np.allclose(Q.mean(axis=0), m.weights @ m.means, atol=0.02)
    k = int(np.argmax(m.weights))
    cov = np.linalg.inv(m.prec_chol[k] @ m.prec_chol[k].T)
    near = Q[np.argmin(((Q[:, None] - m.means[None]) ** 2).sum(axis=2), axis=1) == k]
    assert np.allclose(np.cov(near.T), cov, atol=0.05)


def test_a_map_that_undoes_a_shift_restores_the_scores() -> None:
    """B = A shifted by c: the map x -> x - c / scale (standardised) makes A's detector score B's records as A's."""
    rng = np.random.default_rng(1)
    A = rng.normal(0, 1, (500, 3)) * [1, 2, 3]
    det = MixtureDetector(components=2, log_transform=False).fit(A)
    c = np.array([5.0, -3.0, 10.0])
    layout = Layout(3, 4)
    parts = layout.unpack(init(layout, rng))
    parts["a"][:] = 0.0  # no hidden part: f(x) = 1/2 ||x||^2 + w.x, the map x + w
    parts["w"][:] = -c / det.preprocessor_.scale
    mapped = MappedDetector(det, layout, layout.pack(parts))
    assert np.allclose(mapped.score_samples(A + c), det.score_samples(A), atol=1e-9)
    assert mapped.threshold_ == det.threshold_
    assert not np.allclose(det.score_samples(A + c), det.score_samples(A), atol=1e-3)


def test_samples_of_q_are_flagged_at_the_detectors_nominal_rate() -> None:
    """Records on discrete values (six flags, constant within each cluster): the training adds its ridge to every
    covariance, so samples drawn with it spread where the records do not vary at all, and the detector flags 65 %
    of them at a threshold that flags 5 % of its training records. Q (fleet.target) takes the ridge off again."""
    rng = np.random.default_rng(0)
    c = rng.integers(2, size=3000)
    X = np.c_[rng.normal(0, 1, (3000, 2)) + 5 * c[:, None], np.repeat(c[:, None], 6, axis=1) * np.arange(1, 7)]
    det = MixtureDetector(components=2, log_transform=False, quantile=0.95).fit(X)
    flagged = np.asarray(det.score_samples(det.preprocessor_.inverse_transform(target(det, 20_000, 1)))) \
        > det.threshold_
    assert 0.035 < flagged.mean() < 0.075


def test_the_ridge_travels_with_the_mixture() -> None:
    """Q is drawn without the ridge the mixture was trained with: a promoted model (its envelope) carries it."""
    rng = np.random.default_rng(2)
    det = MixtureDetector(components=2, reg=0.03, log_transform=False).fit(rng.normal(0, 1, (300, 3)))
    again = MixtureDetector.from_wire(*det.to_wire())
    assert again.reg == 0.03
    assert np.array_equal(target(again, 100, 4), target(det, 100, 4))


def test_a_ridge_must_be_a_number_at_least_zero() -> None:
    det = MixtureDetector(components=1, log_transform=False).fit(np.random.default_rng(3).normal(0, 1, (50, 2)))
    with pytest.raises(ValueError, match="ridge"):
        mixture_samples(det.mixture_, 10, np.random.default_rng(0), -1.0)
