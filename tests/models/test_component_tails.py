"""Scoring options of the trained mixture: each component's own tail (models.mixture.component_tails), the
weight-free best component (`scoring`, models.mixture.fedem.SCORINGS) and a coarser mixture (models.mixture.coarse)."""

from __future__ import annotations

import numpy as np
import pytest

from models.detection.preprocessing import Preprocessor
from models.detection.threshold import EDGES, error_histogram
from models.mixture.component_tails import ComponentTails, cross_fitted
from models.mixture.detector import MixtureDetector
from models.mixture.gmm import Mixture
from models.mixture.simulator import simulate_mixture


def two_components(n_light: int = 400) -> ComponentTails:
    """Held-out scores: a heavy component's around 10, a light component's (rare normal traffic) around 30."""
    rng = np.random.default_rng(0)
    H = np.zeros((2, len(EDGES) - 1))
    H[0] = error_histogram(rng.normal(10, 1, 4000).clip(1))
    H[1] = error_histogram(rng.normal(30, 1, n_light).clip(1))
    return ComponentTails(H, q=0.985)


def test_a_record_is_judged_against_its_own_components_tail():
    """A score of 15 is far out for the heavy component, 28 ordinary for the light one: the fleet's single tail
    ranks 28 higher; each component's own ranks 15 higher (red if the scores pass through unchanged)."""
    tails = two_components()
    calibrated = tails(np.array([15.0, 28.0]), np.array([0, 1]))
    assert calibrated[0] > calibrated[1] + 2, calibrated


def test_a_component_with_few_held_out_records_follows_the_fleets_tail():
    """With 3 held-out records the light component cannot tell its own tail: shrunk toward the fleet's (n0 = 1 /
    (1 - q), 67 records here), a 28 there is not judged ordinary but about as far out as in the fleet."""
    few, many = two_components(n_light=3), two_components(n_light=4000)
    assert few(np.array([28.0]), np.array([1]))[0] > many(np.array([28.0]), np.array([1]))[0] + 1


def test_scores_beyond_every_held_out_record_stay_ordered():
    tails = two_components()
    out = tails(np.array([50.0, 100.0, 1000.0]), np.array([1, 1, 1]))
    assert (np.diff(out) > 0).all() and np.isfinite(out).all()


def test_component_tails_are_checked():
    with pytest.raises(ValueError, match=r"component tails need \(components, 8192\) non-negative counts"):
        ComponentTails(np.zeros((2, 10)), 0.985)
    with pytest.raises(ValueError, match="at least one held-out record"):
        ComponentTails(np.zeros((2, len(EDGES) - 1)), 0.985)


def fleet(seed: int, devices: int = 8, n: int = 400) -> list[np.ndarray]:
    """Two kinds of traffic: a common one and a rare one (5 % of each device's records)."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(devices):
        rare = rng.random(n) < 0.05
        X = rng.normal(0, 1, (n, 3))
        X[rare] = rng.normal(6, 0.3, (int(rare.sum()), 3))
        parts.append(X)
    return parts


def test_the_simulator_scores_by_the_component_tails_it_read_from_the_held_out_records():
    parts, X = fleet(0), np.vstack(fleet(1, devices=2))
    run = simulate_mixture(parts, X, np.zeros(len(X)), ["a", "b", "c"], rounds=10, fraction=0.5, quantile=0.95,
                           params={"components": 4, "component_tails": "own"})
    det: MixtureDetector = run["detector"]
    assert det.component_tails_ is not None
    assert not np.allclose(det.score_samples(X), run_plain_scores(det, X))
    plain = MixtureDetector.from_model(det.mixture_, det.preprocessor_, 1.0, det.shared_)
    np.testing.assert_allclose(det.score_samples(X), det.component_tails_(plain.score_samples(X),
                                                                          plain.best_components(X)))
    # every kind of traffic keeps about 1 - q of its normal records above the threshold: the rare kind's records no
    # longer take the false-positive budget alone
    rare = X[:, 0] > 3
    flagged = det.score_samples(X) > det.threshold_
    assert flagged[rare].mean() < 0.3 and 0.01 < flagged.mean() < 0.12, (flagged[rare].mean(), flagged.mean())


def run_plain_scores(det: MixtureDetector, X: np.ndarray) -> np.ndarray:
    return np.asarray(MixtureDetector.from_model(det.mixture_, det.preprocessor_, 1.0, det.shared_).score_samples(X))


def test_the_threshold_is_read_from_cross_fitted_scores():
    """Curves read from the very records the threshold is read from put each record inside its own tail: new
    normal records exceed that threshold more often than promised. Each half calibrated by the other half's curves
    keeps new records near 1 - q (red if the halves' curves are replaced by the whole's)."""
    rng = np.random.default_rng(3)
    K, per, q = 60, 30, 0.95

    def draw() -> tuple[list[np.ndarray], list[np.ndarray]]:
        comps = np.repeat(np.arange(K), per)
        return [rng.gamma(2.0, 1.0 + comps / 10) + 1], [comps]

    scores, comps = draw()
    tails, calibrated = cross_fitted(scores, comps, K, q)
    fresh_scores, fresh_comps = draw()
    fresh = tails(fresh_scores[0], fresh_comps[0])
    crossed = float((fresh > np.quantile(calibrated[0], q)).mean())
    itself = float((fresh > np.quantile(tails(scores[0], comps[0]), q)).mean())
    assert crossed < itself and abs(crossed - (1 - q)) < 0.02, (crossed, itself)


def test_weight_free_scoring_reads_a_light_component_as_a_heavy_one():
    """Two alike components, weights 0.99 / 0.01: by the mixture's density a record at the light one's mean scores
    log(99) above one at the heavy one's; by the best component, weight-free, both score 0 (red if `scoring` is
    ignored)."""
    m = Mixture(np.array([0.99, 0.01]), np.array([[0.0], [10.0]]), np.ones((2, 1, 1)))
    pre = Preprocessor(["x"], np.zeros(1, bool), np.zeros(1), np.ones(1))
    X = np.array([[0.0], [10.0]])
    by_mixture = MixtureDetector.from_model(m, pre, 1.0).score_samples(X)
    by_component = MixtureDetector.from_model(m, pre, 1.0, scoring="component").score_samples(X)
    assert by_mixture[1] - by_mixture[0] == pytest.approx(np.log(99), rel=1e-6)
    np.testing.assert_allclose(by_component, [0.0, 0.0], atol=1e-9)
    both = MixtureDetector.from_model(m, pre, 1.0, scoring="both")
    assert both.mixture_scores(X).shape == (2, 2)
    with pytest.raises(ValueError, match="calibrated"):
        both.score_samples(X)
    with pytest.raises(ValueError, match="scoring must be one of mixture, component, both, got 'best'"):
        MixtureDetector.from_model(m, pre, 1.0, scoring="best")
    again = MixtureDetector.from_wire(*MixtureDetector.from_model(m, pre, 1.0, scoring="component").to_wire())
    np.testing.assert_allclose(again.score_samples(X), by_component)


def test_both_tails_score_by_the_smaller_tail_probability_of_the_two():
    parts, X = fleet(0), np.vstack(fleet(1, devices=2))
    run = simulate_mixture(parts, X, np.zeros(len(X)), ["a", "b", "c"], rounds=10, fraction=0.5, quantile=0.95,
                           params={"components": 4, "component_tails": "both"})
    det: MixtureDetector = run["detector"]
    assert det.tails_scales_ is not None and det.tails_scales_.shape == (2, 2)
    plain = MixtureDetector.from_model(det.mixture_, det.preprocessor_, 1.0, det.shared_)
    raw = plain.score_samples(X)
    own = det.component_tails_(raw, plain.best_components(X))
    z = (np.vstack([raw, own]) - det.tails_scales_[:, :1]) / det.tails_scales_[:, 1:]
    np.testing.assert_allclose(np.log(det.score_samples(X)), z.max(axis=0), rtol=1e-9)
    assert 0.01 < run["false_positive_rate"] < 0.12
    with pytest.raises(ValueError, match="component_tails must be one of none, own, both"):
        simulate_mixture(parts, X, np.zeros(len(X)), ["a", "b", "c"], rounds=2, fraction=0.5,
                         params={"components": 4, "component_tails": "yes"})


def test_the_coarse_mixture_keeps_each_groups_moments():
    """Four components merged by 2: two groups (near 0 and near 10), each one Gaussian with its group's weight, mean
    and covariance (the mixture's within-group spread included; red if the components were not merged)."""
    from models.mixture.coarse import merged
    from models.mixture.gmm import precisions

    w = np.array([0.1, 0.3, 0.4, 0.2])
    mu = np.array([[0.0], [1.0], [10.0], [12.0]])
    m = Mixture(w, mu, np.ones((4, 1, 1)))  # unit variances
    c = merged(m, 2)
    order = np.argsort(c.means[:, 0])
    np.testing.assert_allclose(c.weights[order], [0.4, 0.6])
    np.testing.assert_allclose(c.means[order, 0], [0.75, 32 / 3])
    var = 1 / precisions(c.prec_chol)[order, 0, 0]
    np.testing.assert_allclose(var, [1 + (0.1 * 0.75**2 + 0.3 * 0.25**2) / 0.4,
                                     1 + (0.4 * (2 / 3) ** 2 + 0.2 * (4 / 3) ** 2) / 0.6])
    with pytest.raises(ValueError, match=r"coarse: the factor must be between 2 and the components \(4\), got 1"):
        merged(m, 1)


def test_the_simulator_scores_by_both_mixtures_once_calibrated():
    parts, X = fleet(0), np.vstack(fleet(1, devices=2))
    run = simulate_mixture(parts, X, np.zeros(len(X)), ["a", "b", "c"], rounds=10, fraction=0.5, quantile=0.95,
                           params={"components": 4, "coarse": 2})
    det: MixtureDetector = run["detector"]
    assert det.coarse_ is not None and det.coarse_.n_components == 2 and det.n_scores == 2
    assert len(run["ridge_scales"]) == 2 and 0.01 < run["false_positive_rate"] < 0.12
    with pytest.raises(ValueError, match="simulator only"):
        det.to_wire()


@pytest.mark.parametrize("param", [{"component_tails": "own"}, {"scoring": "component"}, {"coarse": 4}])
def test_a_job_refuses_the_scoring_options(param):
    from models.mixture.spec import MixtureJobSpec
    from models.params import SettingError

    with pytest.raises(SettingError, match=r"run(s)? in the simulator only so far"):
        MixtureJobSpec.from_dict({"features": ["a", "b"], "algorithm_params": param})
