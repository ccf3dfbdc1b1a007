"""The attacks users run (`simulate pca --adversaries K --attack NAME`, models.detection.attacks): each one does what
it says,
within or outside the checks as it claims, and runs end to end through both simulators on a tiny fleet."""

from __future__ import annotations

import numpy as np
import pytest

from models.detection.attacks import ATTACKS, OFF_DIAGONAL, ROGUE_DATA, Adversaries, not_applicable
from models.detection.screening import DEFAULT_GUARD, capped_weights, check_histogram, check_summary
from models.detection.threshold import EDGES
from models.families import family
from models.mixture.fedem import FedEM, moments_psd
from models.mixture.gmm import hard_stats, nearest
from models.mixture.rogues import compliant_rogues
from models.mixture.simulator import simulate_mixture
from models.pca import FedMM, FedPG
from models.pca.fedmm import admissible_scale
from models.pca.simulator import simulate_pca
from models.synthetic import generate_traffic

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def fleet():
    t = generate_traffic(n_devices=6, records_per_device=150, seed=1)
    parts = [t.X_normal[t.device_normal == i] for i in range(6)]
    X_test = np.vstack([t.X_normal[::7], t.X_attack])
    y_test = np.r_[np.zeros(len(t.X_normal[::7])), np.ones(len(t.X_attack))]
    return parts, X_test, y_test, t.feature_names


def run(fleet, detector: str, attack: str | None, algorithm: str | None = None, count: int = 1) -> dict:
    parts, X_test, y_test, names = fleet
    adv = Adversaries(count, attack, seed=0) if attack else Adversaries()
    if attack in ROGUE_DATA:
        parts = compliant_rogues(parts, X_test[y_test == 1], count, rows=60)
    if detector == "gmm":
        return simulate_mixture(parts, X_test, y_test, names, rounds=6, fraction=0.5, params={"components": 8},
                                adversaries=adv)
    return simulate_pca(parts, X_test, y_test, names, algorithm or "fedpg", rank=2, rounds=6, fraction=0.5,
                        adversaries=adv)


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("detector", ["gmm", "pca"])
def test_every_attack_runs_end_to_end_where_it_applies(fleet, detector, attack):
    algorithm = "fedmm" if attack == "non-psd" and detector == "pca" else ("fedem" if detector == "gmm" else "fedpg")
    if not_applicable(attack, algorithm, family(detector).algorithms[algorithm]):
        assert (detector, attack) == ("gmm", "rotated")
        return
    r = run(fleet, detector, attack, algorithm)
    assert 0 <= r["recall"] <= 1 and 0 <= r["auc_roc"] <= 1 and r["threshold"] > 0


def test_what_does_not_apply_says_why():
    assert "a mixture has none" in not_applicable("rotated", "fedem", FedEM)
    assert "fedpg uploads a basis" in not_applicable("non-psd", "fedpg", FedPG)
    assert not_applicable("non-psd", "fedmm", FedMM) is None
    assert "no federation" in not_applicable("random", "centralized", None)
    assert not_applicable("compliant", "centralized", None) is None
    assert "unknown attack" in not_applicable("flood", "fedem", FedEM)
    with pytest.raises(ValueError, match="unknown attack"):
        Adversaries(1, "flood")


def mixture_upload(seed: int = 0):
    """An honest k-means-round upload of three devices (per record, as FedEM's client step sends it), with the
    devices' mean and mean square."""
    rng = np.random.default_rng(seed)
    X = [rng.standard_normal((200, 4)) @ rng.standard_normal((4, 4)) + i for i in range(3)]
    means = rng.standard_normal((5, 4)) * 2
    stats = [hard_stats(x, nearest(x, means), 5) for x in X]
    up = {k: np.stack([s[j] / len(x) for s, x in zip(stats, X)]) for j, k in enumerate(("R", "S1", "S2"))}
    return up, np.stack([x.mean(axis=0) for x in X]), np.stack([(x**2).mean(axis=0) for x in X])


@pytest.mark.parametrize(("attack", "admitted"), [("max-variance", True), ("non-psd", False)])
def test_mixture_uploads_are_within_the_checks_or_outside_them_as_claimed(attack, admitted):
    up, mean, mean_sq = mixture_upload()
    alg = FedEM(4, components=5)
    evil = np.array([True, False, False])
    tampered = Adversaries(1, attack).tamper(evil, {"pi": np.ones(5) / 5}, np.random.default_rng(0))(up)
    assert not np.allclose(tampered["S2"][0], up["S2"][0]) and np.array_equal(tampered["S2"][1:], up["S2"][1:])
    R, S1, S2 = (tampered[k] for k in ("R", "S1", "S2"))
    diagonal = np.array([i * 4 - i * (i - 1) // 2 for i in range(4)])  # (i, i) in a packed upper triangle
    for name, total in (("R", R.sum(axis=1)), ("S1", S1.sum(axis=1)), ("S2", S2[..., diagonal].sum(axis=1))):
        honest = up[name].sum(axis=1) if name != "S2" else up[name][..., diagonal].sum(axis=1)
        assert np.allclose(total, honest), name  # sums and diagonals as the device claimed
    assert moments_psd(R, S1, S2, 4).tolist() == [admitted, True, True]  # only the PSD test can tell
    assert alg.consistent(R, S1, S2, mean, mean_sq, seeding=False).tolist() == [admitted, True, True]


def test_pca_second_moments_within_the_bounds_or_outside_them_as_claimed():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((3, 6, 6))
    C = A @ np.swapaxes(A, 1, 2) / 6
    diag = np.diagonal(C, axis1=1, axis2=2)
    Q = np.linalg.qr(rng.standard_normal((6, 4)))[0]
    wide = Adversaries(1, "max-variance").second_moments(C)
    assert np.allclose(np.diagonal(wide[0]), diag[0]) and np.linalg.matrix_rank(wide[0]) == 1
    assert np.array_equal(wide[1:], C[1:])
    assert admissible_scale(wide @ Q, np.broadcast_to(Q, (3, 6, 4)), diag.sum(axis=1), diag)[0] == pytest.approx(1)
    bad = Adversaries(1, "non-psd").second_moments(C)
    assert bad[0, 0, 1] == C[0, 0, 1] + OFF_DIAGONAL and np.allclose(np.diagonal(bad[0]), diag[0])
    assert admissible_scale(bad @ Q, np.broadcast_to(Q, (3, 6, 4)), diag.sum(axis=1), diag)[0] == 0  # refused


def test_inflate_claims_the_most_records_the_statistics_phase_admits():
    rng = np.random.default_rng(3)
    means = rng.standard_normal((21, 3))
    summaries = [(100, m * 100, (m**2 + 1 + rng.random(3)) * 100) for m in means]
    claims = Adversaries(2, "inflate").summaries(summaries, DEFAULT_GUARD.max_records)
    for (n, t, s), (m, u, v) in zip(summaries[:2], claims[:2]):
        assert m == DEFAULT_GUARD.max_records and np.allclose(u / m, t / n) and np.allclose(v / m, s / n)
        assert check_summary(m, u, v, DEFAULT_GUARD, 710.0) is None
    assert claims[2:] == summaries[2:]
    w = capped_weights(np.array([c[0] for c in claims], float), DEFAULT_GUARD)
    assert w[0] == pytest.approx(2 * w[5])  # the cap: twice the median count, whatever it claims


def test_threshold_attack_fills_the_top_bin_with_the_records_it_claimed():
    h = [(np.array([10, 20], dtype=np.int32), np.array([5, 7], dtype=np.int64))] * 3
    out = Adversaries(1, "threshold").histograms(h, len(EDGES) - 1)
    assert out[0][0].tolist() == [len(EDGES) - 2] and out[0][1].tolist() == [12] and out[1:] == h[1:]
    assert check_histogram(*out[0], 12) is None  # within the coordinator's checks


def test_non_psd_uploads_are_refused_counted_and_the_job_goes_on(fleet):
    gmm = run(fleet, "gmm", "non-psd")
    assert gmm["rejected_uploads"] > 0 and gmm["auc_roc"] > 0.8
    pca = run(fleet, "pca", "non-psd", "fedmm")
    assert pca["rejected_uploads"] > 0 and pca["auc_roc"] > 0.6
    assert run(fleet, "gmm", None)["rejected_uploads"] == 0


def test_the_threshold_attack_moves_the_threshold_and_max_variance_the_subspace(fleet):
    clean = run(fleet, "pca", None)
    assert run(fleet, "pca", "threshold", count=2)["threshold"] > clean["threshold"]
    exact = run(fleet, "pca", None, "fedmm")
    wide = run(fleet, "pca", "max-variance", "fedmm")
    assert wide["rejected_uploads"] == 0  # within every bound the server checks, so admitted
    assert wide["subspace_distance"] > exact["subspace_distance"] + 0.05, (wide["subspace_distance"],
                                                                          exact["subspace_distance"])


def test_two_threshold_attackers_of_21_raise_pca_threshold_only_to_the_honest_devices_trimmed_mean():
    """The simulator's threshold (the coordinator's rule, models.detection.screening.robust_threshold) with the
    first two of 21 devices sending every record in the top bin: the honest devices' symmetric trimmed mean of
    their own quantiles, which the attackers' displacing the honest top devices used to exceed."""
    from models.detection.robust import residuals
    from models.detection.screening import device_quantile
    from models.detection.threshold import sparse_histogram
    from models.pca.baselines import centralized_pca
    from models.pca.simulator import federated_threshold, prepare_clients

    t = generate_traffic(n_devices=21, records_per_device=200, seed=3)
    fleet = prepare_clients([t.X_normal[t.device_normal == i] for i in range(21)], t.feature_names)
    Z = centralized_pca(fleet.C, fleet.weight, 2)
    lied = federated_threshold(fleet, Z, 0.99, adversaries=Adversaries(2, "threshold"))
    logs = np.array([np.log(device_quantile(*sparse_histogram(residuals(x, Z)), 0.99)) for x in fleet.X[2:]])
    k = 2  # trim_count(21, device_trim 0.1)
    window = np.argsort(logs, kind="stable")[k:len(logs) - k]
    w = fleet.weight[2:][window]
    assert lied == pytest.approx(np.exp((logs[window] * w).sum() / w.sum()), rel=1e-9)
    assert lied < federated_threshold(fleet, Z, 0.99) * 1.1
