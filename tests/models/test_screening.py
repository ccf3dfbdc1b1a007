"""What one device may weigh (models.detection.screening): refused claims, capped weights, bounded influence."""

import numpy as np
import pytest

from models.core.aggregation import winsorized_weighted_mean
from models.detection.preprocessing import Moments, global_standardisation
from models.detection.screening import (
    Guard,
    capped_weights,
    check_histogram,
    check_summary,
    crossing,
    device_quantile,
    exceedance_threshold,
    federation_statistics,
    fleet_tail,
    robust_threshold,
    stack_summaries,
)
from models.detection.threshold import EDGES, error_histogram
from models.pca.fedmm import plausible

G = Guard()


def honest(n_devices=20, d=5, seed=0):
    rng = np.random.default_rng(seed)
    return [Moments.of(rng.normal(rng.normal(0, 0.3, d), 1.0, (200 + 10 * i, d))) for i in range(n_devices)]


def test_an_honest_federation_gets_the_plain_pooled_statistics():
    moments = honest()
    fed = federation_statistics(*stack_summaries([m.summary() for m in moments]), G)
    mean, scale, _ = global_standardisation([m.summary() for m in moments])
    assert np.allclose(fed.mean, mean) and np.allclose(fed.scale, scale)
    C = np.stack([m.second_moment(fed.mean, fed.scale) for m in moments])
    assert np.allclose(np.diagonal(C, axis1=1, axis2=2), fed.diag, rtol=1e-6)
    assert np.allclose(fed.weight, [m.count for m in moments] / np.mean([m.count for m in moments]))


def test_one_device_claiming_a_huge_variance_moves_a_scale_by_at_most_sqrt_of_one_plus_influence():
    moments = honest()
    count, total, sumsq = stack_summaries([m.summary() for m in moments])
    clean = federation_statistics(count[:-1], total[:-1], sumsq[:-1], G)
    count[-1] = 10**6  # as many records as a job accepts (the weight is capped), variance 700^2 on 4 features
    total[-1] *= 10**6 / 210
    sumsq[-1, :4] = total[-1, :4] ** 2 / count[-1] + 700.0**2 * count[-1]
    fed = federation_statistics(count, total, sumsq, G)
    ratio = fed.scale / clean.scale
    assert (ratio <= np.sqrt(1 + G.influence) * 1.01).all(), ratio
    assert (ratio[4:] < 1.2).all()
    plain = global_standardisation([(int(c), t, s) for c, t, s in zip(count, total, sumsq)])[1]
    assert (plain[:4] / clean.scale[:4] > 100).all()  # what the pooled statistics would have done


def test_counts_are_capped_at_the_median_multiple_and_the_share():
    w = capped_weights(np.array([100.0] * 10 + [1e12]), G)
    assert w[-1] / w.sum() == pytest.approx(G.max_share)
    assert np.allclose(w[:-1], w[0])
    w = capped_weights(np.array([100.0] * 20 + [150.0]), G)  # under both caps: proportional
    assert w[-1] / w[0] == pytest.approx(1.5)
    w = capped_weights(np.array([100.0] * 30 + [1000.0]), G)  # the median cap alone
    assert w[-1] / w[0] == pytest.approx(G.count_cap)
    assert np.allclose(capped_weights(np.array([1.0, 1e9]), G), 1.0)  # two devices: each at most half


@pytest.mark.parametrize("claim, problem", [
    ((0, 1.0, 1.0), "count"), ((2.5, 1.0, 1.0), "count"), ((10**7, 1.0, 1.0), "count"),
    ((10, np.inf, 1.0), "finite"), ((10, np.nan, 1.0), "finite"), ((10, 1e300, 1e300), "beyond"),
    ((10, 10.0, 1.0), "negative variance"),
])
def test_impossible_statistics_are_refused(claim, problem):
    n, t, s = claim
    assert problem in check_summary(n, np.array([t, 0.0]), np.array([s, 0.0]), G, 710.0)


def test_an_honest_summary_passes():
    n, t, s = honest()[0].summary()
    assert check_summary(n, t, s, G, 710.0) is None


def test_histograms_must_hold_the_claimed_records_on_the_grid():
    counts = error_histogram(np.random.default_rng(0).exponential(1.0, 500))
    nz = np.flatnonzero(counts)
    bins, c = nz.astype(np.int32), counts[nz].astype(np.int64)
    assert check_histogram(bins, c, 500) is None
    assert "not the 500" in check_histogram(bins, c * 2, 500)
    assert "integers" in check_histogram(bins.astype(float), c, 500)
    assert "increasing" in check_histogram(bins[::-1], c[::-1], 500)
    assert "increasing" in check_histogram(np.array([len(EDGES) - 1]), np.array([500]), 500)
    assert "non-negative" in check_histogram(bins[:2], np.array([501, -1]), 500)


def test_one_device_moves_the_threshold_by_at_most_the_spread_of_the_others():
    rng = np.random.default_rng(1)
    hists = []
    for _ in range(10):
        counts = error_histogram(rng.exponential(1.0, 1000))
        nz = np.flatnonzero(counts)
        hists.append((nz, counts[nz]))
    w = np.ones(11)
    clean = robust_threshold(hists, w[:10], 0.99, G.device_trim)
    top = (np.array([len(EDGES) - 2]), np.array([1000]))
    rogue = robust_threshold([*hists, top], w, 0.99, G.device_trim)
    assert clean < rogue < clean * 1.2


def test_colluders_at_the_top_raise_the_threshold_no_further_than_the_honest_devices_own_trimmed_mean():
    """Issue 22, point 2: two devices of 21 sending every record in the top bin were trimmed in place of the honest
    devices with the highest quantiles, which then counted (nsl-kdd, FedPG: 61.8 -> 40.1 % caught)."""
    rng = np.random.default_rng(3)
    scales = np.exp(rng.uniform(0, np.log(8), 21))  # non-i.i.d.: device quantiles over almost a decade
    hists = []
    for s in scales:
        counts = error_histogram(s * rng.exponential(1.0, 2000))
        nz = np.flatnonzero(counts)
        hists.append((nz, counts[nz]))
    w = np.ones(21)
    liars = np.argsort(scales)[:2]  # the colluders' own traffic was the most ordinary
    honest = [h for i, h in enumerate(hists) if i not in liars]
    top = (np.array([len(EDGES) - 2]), np.array([2000]))
    forged = [top if i in liars else h for i, h in enumerate(hists)]
    k = 2  # trim_count(21, G.device_trim)
    logs = np.sort([np.log(device_quantile(b, c, 0.99)) for b, c in honest])
    bound = np.exp(logs[k:len(logs) - k].mean())  # the honest devices' symmetric trimmed mean
    lied = robust_threshold(forged, w, 0.99, G.device_trim, G.colluders)
    assert lied == pytest.approx(bound, rel=1e-9)
    assert robust_threshold(forged, w, 0.99, G.device_trim) > bound * 1.05  # the trim alone let them raise it
    clean = robust_threshold(hists, w, 0.99, G.device_trim, G.colluders)
    assert clean < robust_threshold(hists, w, 0.99, G.device_trim)  # what it costs an honest fleet: a lower one


def test_colluders_at_the_top_raise_the_mixture_threshold_no_further_than_the_honest_devices_own_curve():
    """The mixture's winsorised exceedance curve, as PCA's trimmed mean above: two devices of 21 sending every
    record in the top bin took the places winsorising pulls in, counted as the honest device with the most records
    above each threshold, and let the honest devices above the others' range count whole (nsl-kdd, 60 rounds:
    threshold x3.3, caught 82.6 -> 75.1 %)."""
    rng = np.random.default_rng(3)
    scales = np.exp(rng.uniform(0, np.log(8), 21))  # non-i.i.d.
    hists = [sparse(s * rng.exponential(1.0, 64)) for s in scales]  # 64 held-out records, as on nsl-kdd
    w, q, trim, colluders = np.ones(21), 0.985, 0.01, 2  # the mixture job's defaults (MixtureJobSpec, FedEM)
    liars = np.argsort(scales)[:2]
    honest = [h for i, h in enumerate(hists) if i not in liars]
    forged = [(np.array([len(EDGES) - 2]), np.array([64])) if i in liars else h for i, h in enumerate(hists)]
    used = np.unique(np.concatenate([b for b, _ in honest]))
    dense = np.zeros((19, len(used)))
    for row, (b, c) in enumerate(honest):
        dense[row, np.searchsorted(used, b)] = c
    shares = 1.0 - np.cumsum(dense, axis=1) / dense.sum(axis=1, keepdims=True)
    bound = crossing(used, winsorized_weighted_mean(shares, w[:19], trim, colluders), 1 - q)  # theirs, nothing left out
    lied = exceedance_threshold(forged, w, q, trim, colluders)
    assert lied <= bound * (1 + 1e-9)
    assert fleet_tail(forged, w, q, trim, 0.2, colluders)[0] == lied
    # what leaving them out stops: winsorising alone let the pair raise it
    forged_shares = np.vstack([shares, np.ones((2, len(used)))])
    assert crossing(used, winsorized_weighted_mean(forged_shares, w, trim, colluders), 1 - q) > bound * 1.2


def test_leaving_out_the_top_devices_before_winsorising():
    X = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [100.0]])
    one = np.ones(7)
    assert winsorized_weighted_mean(X, one, 0.01, 1)[0] == pytest.approx((1 + 1 + 2 + 3 + 4 + 5 + 5) / 7)
    # the top device left out, then one winsorised each side of the six left
    assert winsorized_weighted_mean(X, one, 0.01, 1, above=1)[0] == pytest.approx((1 + 1 + 2 + 3 + 4 + 4) / 6)
    assert winsorized_weighted_mean(X, one, 0.01, 1, above=5)[0] == pytest.approx(
        winsorized_weighted_mean(X[:4], one[:4], 0.01, 1)[0])  # never the majority: 3 of 7
    w = np.array([1.0, 1, 1, 1, 1, 3, 1])  # a weight goes with its device
    assert winsorized_weighted_mean(X, w, 0.01, 1, above=1)[0] == pytest.approx((1 + 1 + 2 + 3 + 4 + 3 * 4) / 8)


def sparse(errors):
    counts = error_histogram(errors)
    nz = np.flatnonzero(counts)
    return nz, counts[nz]


def test_an_invented_statistic_on_a_feature_with_little_reported_variance_is_refused():
    rng = np.random.default_rng(2)
    d = 6
    X = rng.normal(0, 1, (500, d)) * np.array([1, 1, 1, 1, 1, 0.05])
    C = X.T @ X / len(X)
    Q = np.linalg.qr(rng.standard_normal((d, 4)))[0]
    diag, trace = np.diag(C), np.trace(C)
    assert plausible((C @ Q)[None], Q[None], np.array([trace]), diag[None])[0]
    v = np.zeros(d)
    v[[0, 5]] = 1 / np.sqrt(2)  # steering towards feature 5, on which the device reported a tiny variance
    fake = trace * np.outer(v, v)
    assert not plausible((fake @ Q)[None], Q[None], np.array([trace]), diag[None])[0]
