"""The Gaussian-mixture detector and its federated training (models.mixture)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture

from models.core.pipeline import close_round
from models.detection.preprocessing import Moments, Preprocessor, as_device_records, signed_log1p
from models.detection.screening import exceedance_threshold
from models.detection.threshold import error_histogram, holdout_mask, quantile_from_histogram, sparse_histogram
from models.families import job_spec
from models.mixture.detector import MixtureDetector, fit_em, mixture_problem
from models.mixture.fedem import FedEM, colluders, standardised_moments
from models.mixture.gmm import Mixture, e_step, hard_stats, kmeans, m_step, triu_unpack
from models.mixture.simulator import device_data, device_moments
from models.params import SettingError


def blobs(n=600, d=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 4, (3, d))
    return np.vstack([c + rng.normal(0, 1, (n // 3, d)) @ rng.normal(0, 0.5, (d, d)) for c in centres])


def test_em_step_matches_scikit_learn():
    X = blobs()
    _, labels = kmeans(X, 3, np.random.default_rng(1))
    m = m_step(*hard_stats(X, labels, 3), reg=1e-3)
    R, S1, S2, ll = e_step(X, m)
    ours = m_step(R, S1, S2, reg=1e-3)
    g = GaussianMixture(3, reg_covar=1e-3)
    g.weights_, g.means_, g.precisions_cholesky_ = m.weights, m.means, m.prec_chol
    g.covariance_type = "full"
    assert ll == pytest.approx(g.score_samples(X).sum(), rel=1e-9)
    _, log_resp = g._estimate_log_prob_resp(X)
    g._m_step(X, log_resp)
    np.testing.assert_allclose(ours.weights, g.weights_, atol=1e-12)
    np.testing.assert_allclose(ours.means, g.means_, atol=1e-10)
    np.testing.assert_allclose(ours.prec_chol, g.precisions_cholesky_, atol=1e-8)


def detector(X, K=3):
    names = [f"f{j}" for j in range(X.shape[1])]
    return MixtureDetector(components=K, reg=1e-3, log_transform=False).fit(X, names)


def test_scores_are_shifted_negative_log_likelihoods_and_never_negative():
    X = blobs()
    det = detector(X)
    g = GaussianMixture(3, covariance_type="full")
    m = det.mixture_
    g.weights_, g.means_, g.precisions_cholesky_ = m.weights, m.means, m.prec_chol
    T = det.preprocessor_.transform(X)
    s = np.asarray(det.score_samples(X))
    np.testing.assert_allclose(s, -g.score_samples(T) - det.floor_, rtol=1e-9, atol=1e-8)
    assert (s >= 0).all()
    assert det.score_samples(X[0]) == pytest.approx(s[0])
    assert 0.005 < det.predict(X).mean() < 0.02  # the 0.99 quantile of its own training scores


def test_explanation_names_the_broken_feature_with_its_conditional_mean():
    rng = np.random.default_rng(3)
    cov = np.array([[1, 0.9, 0], [0.9, 1, 0], [0, 0, 1.0]])
    X = rng.multivariate_normal([0, 0, 0], cov, 4000)
    det = detector(X, K=1)
    x = np.array([2.0, -2.0, 0.1])  # each value is ordinary; together they break the correlation
    top = det.explain(x[None], top=3)[0]
    assert {top[0]["feature"], top[1]["feature"]} == {"f0", "f1"} and top[2]["feature"] == "f2"
    # expected = E[x_j | x_-j] under the fitted Gaussian, in original units
    m, pre = det.mixture_, det.preprocessor_
    P = m.prec_chol[0] @ m.prec_chol[0].T
    S = np.linalg.inv(P)
    t, mu = pre.transform(x), m.means[0]
    j = 0
    rest = [1, 2]
    cond = mu[j] + S[j, rest] @ np.linalg.solve(S[np.ix_(rest, rest)], t[rest] - mu[rest])
    e0 = next(e for e in top if e["feature"] == "f0")
    assert e0["value"] == 2.0
    assert e0["expected"] == pytest.approx(cond * pre.scale[0] + pre.mean[0], rel=1e-6)
    assert sum(e["share"] for e in top) == pytest.approx(1, abs=1e-3)


def test_full_participation_is_pooled_em_from_the_merged_seed():
    """With every device in every round, the k-means rounds are Lloyd steps and incremental EM is batch EM on
    the pooled records (as the devices hold them: float32)."""
    X = as_device_records(blobs(900))
    parts = [X[i::4] for i in range(4)]
    alg = FedEM(X.shape[1], components=3, reg=1e-3, float32=False, hard_rounds=2)
    server, bc = alg.init_server(4, np.random.default_rng(0))
    data = device_data(parts, seed=0)
    everyone = np.arange(4)
    w = np.full(4, 1.0)
    _, up = alg.client_update({}, data, bc)
    server, bc = alg.server_update(server, everyone, up, w)  # seeding
    m = alg.consensus(bc)
    for _ in range(2):  # k-means rounds: Lloyd steps on the pooled records
        _, up = alg.client_update({}, data, bc)
        server, bc = alg.server_update(server, everyone, up, w)
        D = ((X[:, None, :] - m.means[None]) ** 2).sum(axis=2)
        m = m_step(*hard_stats(X, D.argmin(axis=1), 3), reg=1e-3)
        np.testing.assert_allclose(alg.consensus(bc).means, m.means, atol=1e-9)
    seeded = alg.consensus(bc)
    assert int(bc["stage"]) == 1
    for _ in range(5):
        _, up = alg.client_update({}, data, bc)
        server, bc = alg.server_update(server, everyone, up, w)
    m = seeded
    for _ in range(5):
        m = m_step(*e_step(X, m)[:3], reg=1e-3)
    fed = alg.consensus(bc)
    np.testing.assert_allclose(fed.means, m.means, atol=1e-9)
    np.testing.assert_allclose(fed.prec_chol, m.prec_chol, atol=1e-7)


def test_the_aggregate_is_every_devices_last_statistics_weighted_by_its_share():
    """Each round's mixture is the M-step of sum_i w_i S_i over every device's last upload (stale for those not
    sampled), with the weights the round was given: a device's share counts, in seeding and after."""
    X = as_device_records(blobs(1200))
    parts = [X[i::4] for i in range(4)]
    alg = FedEM(X.shape[1], components=3, reg=1e-3, float32=False, hard_rounds=1)
    server, bc = alg.init_server(4, np.random.default_rng(0))
    data = device_data(parts, seed=0)
    w = np.array([3.0, 1.0, 0.5, 2.0])
    _, up = alg.client_update({}, data, bc)
    server, bc = alg.server_update(server, np.arange(4), up, w)  # seeding: every device
    last = {}
    for ids in (np.arange(4), np.array([0, 2]), np.array([1]), np.array([3, 0])):  # a k-means round, then EM
        sub = {k: [v[i] for i in ids] if k == "X" else np.asarray(v)[ids] for k, v in data.items()}
        _, up = alg.client_update({}, sub, bc)
        for j, i in enumerate(ids):
            last[int(i)] = [np.asarray(up[k][j], float) for k in ("R", "S1", "S2")]
        server, bc = alg.server_update(server, ids, up, w[ids])
        if len(last) < 4:
            continue
        total = [sum(w[i] * last[i][t] for i in range(4)) for t in range(3)]
        expected = m_step(*total, reg=1e-3)
        np.testing.assert_allclose(alg.consensus(bc).means, expected.means, atol=1e-9)
        np.testing.assert_allclose(alg.consensus(bc).weights, expected.weights, atol=1e-9)
    # seeding with equal weights gives another mixture: the weights are not decoration
    seeded = []
    for weights in (w, np.ones(4)):
        fresh = FedEM(X.shape[1], components=3, reg=1e-3, float32=False, hard_rounds=1)
        s0, b0 = fresh.init_server(4, np.random.default_rng(0))
        _, up = fresh.client_update({}, data, b0)
        seeded.append(fresh.consensus(fresh.server_update(s0, np.arange(4), up, weights)[1]).weights)
    assert not np.allclose(*seeded, atol=1e-3)


def test_uploads_must_add_up_to_the_devices_own_statistics():
    X = blobs()
    parts = [X[:300], X[300:]]
    alg = FedEM(X.shape[1], components=3)
    server, bc = alg.init_server(2, np.random.default_rng(0))
    # what the statistics phase told the coordinator, through the same arithmetic it uses
    summaries = [Moments.of(p).summary() for p in parts]
    count = np.array([s[0] for s in summaries], float)
    mean, scale = np.zeros(X.shape[1]), np.ones(X.shape[1])
    moments = standardised_moments(count, np.stack([s[1] for s in summaries]), np.stack([s[2] for s in summaries]),
                                   mean, scale)
    np.testing.assert_allclose(moments[0], np.stack(device_moments(parts)[0]), atol=1e-12)
    server = alg.attach_bounds(server, *moments)
    data = device_data(parts, 0)
    _, up = alg.client_update({}, data, bc)
    server, bc = alg.server_update(server, np.arange(2), up, np.ones(2))
    _, up = alg.client_update({}, data, bc)  # honest float32 E-step statistics pass
    assert alg.consistent(*(np.asarray(up[k], float) for k in ("R", "S1", "S2")), moments[0], moments[1], False).all()
    forged = {k: np.asarray(v, float).copy() for k, v in up.items()}
    forged["S2"][0] *= 50  # claims far more spread than its statistics said
    forged["S1"][1] += 3.0  # moves its mass elsewhere
    ok = alg.consistent(forged["R"], forged["S1"], forged["S2"], moments[0], moments[1], False)
    assert not ok.any()
    before = bc["means"].copy()
    server, bc2 = close_round(alg, server, np.arange(2), forged, np.ones(2))  # the pipeline validates
    assert int(server["rejected"]) == 2 and list(server["rejected_ids"]) == [0, 1]
    np.testing.assert_array_equal(bc2["means"], before)


def test_exceedance_threshold_is_the_pooled_quantile_and_one_liar_is_bounded():
    rng = np.random.default_rng(0)
    devices = [rng.lognormal(s, 0.5, 1000) for s in np.linspace(0, 1, 10)]
    hists = [sparse_histogram(e) for e in devices]
    pooled = quantile_from_histogram(error_histogram(np.concatenate(devices)), 0.99)
    assert exceedance_threshold(hists, np.ones(10), 0.99, 0.0) == pytest.approx(pooled, rel=0.01)
    honest = exceedance_threshold(hists, np.ones(10), 0.99, 0.1)
    liar = [*hists[:9], sparse_histogram(np.full(1000, 1e7))]  # every record of one device at the top
    lied = exceedance_threshold(liar, np.ones(10), 0.99, 0.1)
    assert honest / 1.5 < lied < honest * 1.5


@pytest.mark.parametrize("where", [1e7, 1e-7])
def test_colluders_below_the_support_rule_cannot_move_the_threshold_far(where):
    """Two devices of 21 sending every record at the top (or the bottom) of the grid: the default mixture job
    winsorises as many devices as may act together (fewer than min_support) and leaves as many out at the top first,
    so the threshold stays within the honest devices' spread."""
    rng = np.random.default_rng(1)
    hists = [sparse_histogram(rng.lognormal(s, 0.5, 1000)) for s in np.linspace(0, 1, 19)]
    honest = exceedance_threshold(hists, np.ones(19), 0.985, 0.01, colluders(3))
    forged = [*hists, sparse_histogram(np.full(1000, where)), sparse_histogram(np.full(1000, where))]
    lied = exceedance_threshold(forged, np.ones(21), 0.985, 0.01, colluders(3))
    assert honest / 1.5 < lied < honest * 1.5
    if where > 1:  # at the top, a third device moves a threshold that assumes one colluder (one left out at the
        # top, one winsorised each side) to the end of the grid
        assert exceedance_threshold([*forged, forged[-1]], np.ones(22), 0.985, 0.01, 1) > honest * 100


def test_holdout_is_every_fifth_record():
    m = holdout_mask(12, 0.2)
    assert m.tolist() == [False] * 4 + [True] + [False] * 4 + [True] + [False] * 2
    assert not holdout_mask(5, 0.0).any()


def test_model_round_trip_and_refusal_of_broken_mixtures():
    X = blobs()
    det = detector(X)
    back = MixtureDetector.from_dict(det.to_dict())
    np.testing.assert_allclose(back.score_samples(X), det.score_samples(X))
    m = det.mixture_
    assert mixture_problem(m) is None
    bad = Mixture(m.weights, m.means.copy(), m.prec_chol)
    bad.means[0, 0] = np.nan
    assert "non-finite" in mixture_problem(bad)
    assert "sum to 1" in mixture_problem(Mixture(m.weights * 2, m.means, m.prec_chol))
    assert "triangular" in mixture_problem(Mixture(m.weights, m.means, np.swapaxes(m.prec_chol, 1, 2) + 0.1))
    pre = Preprocessor(["a", "b"], np.ones(2, bool), np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="features"):
        MixtureDetector.from_model(m, pre, 1.0)
    assert triu_unpack(np.arange(3.0), 2).tolist() == [[0, 1], [1, 2]]


def test_job_settings_are_checked_by_name():
    spec = job_spec("gmm", {"features": ["a", "b", "c"], "algorithm_params": {"components": 8}})
    assert spec.algorithm == "fedem" and spec.holdout == 0.2
    with pytest.raises(SettingError) as e:
        job_spec("gmm", {"features": ["a", "b"], "holdout": 0.9})
    assert e.value.field == "holdout"
    with pytest.raises(SettingError) as e:
        job_spec("gmm", {"features": ["a", "b"], "algorithm_params": {"components": 0}})
    assert e.value.field.startswith("algorithm_params") and "components" in str(e.value)
    with pytest.raises(SettingError) as e:
        job_spec("pca", {"features": ["a", "b", "c", "d"], "holdout": 0.2})
    assert e.value.field == "holdout"


def test_centralised_fit_is_em_to_convergence():
    X = signed_log1p(blobs())
    T = (X - X.mean(0)) / X.std(0)
    m = fit_em(T, 3, 1e-3, np.random.default_rng(0))
    nxt = m_step(*e_step(T, m)[:3], reg=1e-3)
    assert np.abs(nxt.means - m.means).max() < 1e-2


def test_per_device_calibration_evens_out_false_positives_across_non_iid_devices():
    """Heavy-tailed traffic split by sorting on a feature (the non-i.i.d. partition): the device holding the
    tail is flagged far beyond the promised rate under the one global threshold; calibrated on half of its
    held-out records, every device flags about 1 - q of the other half. (ton-iot, 20 such devices: global
    0-14.7 % per device, calibrated 0-5.2 %.)"""
    from models.detection.threshold import device_threshold
    from models.mixture.simulator import simulate_mixture, split_holdout
    from models.partition import partition

    rng = np.random.default_rng(0)
    X = np.exp(rng.normal(0, 1.5, (20000, 3))) * np.array([1, 10, 100]) + rng.integers(0, 3, (20000, 1))
    parts = [X[i] for i in partition(X, 10, "noniid", np.random.default_rng(0))]
    sim = simulate_mixture(parts, X[:10], np.r_[np.zeros(5), np.ones(5)], ["a", "b", "c"], rounds=20, fraction=0.5,
                           params={"components": 4}, holdout=0.4)
    det, q = sim["detector"], 0.98
    rates_global, rates_own = [], []
    fit, held_parts = split_holdout(parts, 0.4)
    for own, held in zip(fit, held_parts):  # each device scores as it does: the fleet's components and its own
        s = np.asarray(copy.copy(det).personalise(own).score_samples(held))
        calib, check = s[::2], s[1::2]
        rates_global.append(np.mean(check > det.threshold_))
        rates_own.append(np.mean(check > device_threshold(det.threshold_, calib, q)))
    assert max(rates_global) > 0.1 and max(rates_own) < 0.04, (rates_global, rates_own)
    assert np.std(rates_own) < 0.5 * np.std(rates_global)
    # bounded: a device cannot move its threshold beyond a factor 2 of the federation's, and too few records
    # keep the federation's
    assert device_threshold(10.0, np.full(500, 1000.0), q) == 20.0
    assert device_threshold(10.0, np.full(500, 0.01), q) == 5.0
    assert device_threshold(10.0, np.full(50, 3.0), q) == 10.0


@pytest.mark.parametrize("seeding", ["merge", "split"])
def test_seeding_finds_separated_groups_of_records(seeding):
    """Either seeding (k-means on the devices' cluster means, or splitting on their summed statistics,
    models.mixture.splitting) starts one component on each of three well-separated groups of records."""
    X = as_device_records(blobs(900, seed=1))
    parts = [X[i::4] for i in range(4)]
    alg = FedEM(X.shape[1], components=3, reg=1e-3, float32=False, seeding=seeding)
    server, bc = alg.init_server(4, np.random.default_rng(0))
    _, up = alg.client_update({}, device_data(parts, seed=0), bc)
    _, bc = alg.server_update(server, np.arange(4), up, np.array([len(p) for p in parts], float))  # records claimed
    truth = np.stack([X[i * 300:(i + 1) * 300].mean(axis=0) for i in range(3)])
    means = alg.consensus(bc).means
    gap = np.sqrt(((means[:, None, :] - truth[None]) ** 2).sum(axis=2))
    assert sorted(gap.argmin(axis=1).tolist()) == [0, 1, 2]
    assert gap.min(axis=1).max() < 1.0


def test_split_seeding_keeps_the_record_count_rule_and_at_most_k_groups():
    """Splitting never makes more than K groups, nor a group fewer than `least` records chose."""
    from models.mixture.splitting import grouped_sums, split_labels
    rng = np.random.default_rng(3)
    means = np.vstack([rng.normal(0, 5, (40, 2)), [[60.0, 60.0], [61.0, 60.0]]])  # two far-out clusters, 8 records
    counts = np.r_[np.full(40, 20.0), 4.0, 4.0]
    R = counts / counts.sum()
    S1 = R[:, None] * means
    S2 = np.stack([r * np.array([m[0] ** 2 + 1, m[0] * m[1], m[1] ** 2 + 1]) for r, m in zip(R, means)])
    labels = split_labels(R, S1, S2, counts, K=8, least=10)
    assert labels.max() < 8
    per_group = np.bincount(labels, weights=counts)
    assert per_group[per_group > 0].min() >= 10
    assert grouped_sums(R, S1, S2, labels, 8)[0].sum() == pytest.approx(1.0)


def test_unknown_seeding_is_refused():
    with pytest.raises(ValueError, match="seeding must be one of merge, split"):
        FedEM(4, seeding="random")
