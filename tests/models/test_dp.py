"""Differential privacy of the summed detectors (models.private.dp, models.private.accounting): the noise calibrated
by dp-accounting spends the target budget and no less noise would do, the noise added has the variance sigma says
(central, and shared among the devices through the real secure sum), each device's upload is clipped to its norm,
the plan is enforced, and the simulations report what they spent."""

from __future__ import annotations

import numpy as np
import pytest

from models.private.accounting import Budget, calibrate, ledger_for, planned, spent
from models.private.dp import Ledger, fewest_uploads
from models.private.transport import SecureTransport

pytestmark = pytest.mark.filterwarnings("ignore")


def direct_epsilon(sigma: float, full: int, sampled: int, q: float, delta: float) -> float:
    """dp-accounting itself, composed here: `full` Gaussian mechanisms and `sampled` Poisson-sampled ones."""
    import dp_accounting
    from dp_accounting import rdp

    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(sigma), full)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), sampled)
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize("epsilon", [1.0, 8.0])
def test_the_calibrated_noise_spends_the_budget_and_no_less_noise_would(epsilon):
    plan = {1.0: 5, 0.1: 60}
    sigma = calibrate(epsilon, 1e-5, planned(plan))
    assert direct_epsilon(sigma, 5, 60, 0.1, 1e-5) <= epsilon
    assert direct_epsilon(sigma * 0.99, 5, 60, 0.1, 1e-5) > epsilon  # the smallest sigma, to 1 %
    assert spent(sigma, planned(plan), 1e-5) == pytest.approx(direct_epsilon(sigma, 5, 60, 0.1, 1e-5), rel=1e-3)


def test_central_noise_has_the_variance_sigma_says():
    ledger = Ledger(2.0, distributed=False, fleet=10, fraction=1.0, seed=3)
    noise = ledger.noise({"a": 0.5, "b": 3.0})  # two names: each gets sqrt(2) sigma clip
    transport = SecureTransport({"a": 1.0, "b": 1.0}, 1.0, noise=noise, secure=False)
    total = transport(np.arange(10), {"a": np.zeros((10, 20000)), "b": np.zeros((10, 20000))})
    assert np.std(total["a"]) == pytest.approx(2.0 * np.sqrt(2) * 0.5, rel=0.03)
    assert np.std(total["b"]) == pytest.approx(2.0 * np.sqrt(2) * 3.0, rel=0.03)
    assert ledger.released == [1.0]


def test_distributed_noise_through_the_secure_sum_carries_at_least_the_target_variance():
    n, sigma, c = 9, 1.5, 2.0
    ledger = Ledger(sigma, distributed=True, fleet=n, fraction=1.0, seed=1)
    transport = SecureTransport({"a": 1.0}, 1.0, noise=ledger.noise({"a": c}), seed=2)
    total = transport(np.arange(n), {"a": np.zeros((n, 6000))})["a"][0]
    # each device added 1 / fewest_uploads of the variance: the full set carries n / m of the target, and the
    # fewest uploads a sum completes with carry the target itself
    expected = sigma * c * np.sqrt(n / fewest_uploads(n))
    assert np.std(total) == pytest.approx(expected, rel=0.05)
    assert np.std(total) > sigma * c


def test_a_devices_share_is_drawn_from_its_own_key_and_the_sums_index_only():
    """The same sum asked again (a retry, a restart) gets the same share; another sum, or another device, an
    independent one of the variance the share says."""
    noise = Ledger(1.0, distributed=True, fleet=4, fraction=1.0).noise({"a": 2.0})
    zero = {"a": np.zeros(20000)}
    first = noise.device_share(zero, 4, [7, 1], 0)["a"]
    np.testing.assert_array_equal(first, noise.device_share(zero, 4, [7, 1], 0)["a"])
    for other in (noise.device_share(zero, 4, [7, 1], 1)["a"], noise.device_share(zero, 4, [7, 2], 0)["a"]):
        assert abs(np.corrcoef(first, other)[0, 1]) < 0.03
    assert np.std(first) == pytest.approx(2.0 / np.sqrt(fewest_uploads(4)), rel=0.03)


def test_each_device_upload_is_clipped_to_its_norm():
    ledger = Ledger(0.0, distributed=False, fleet=3, fraction=1.0)
    noise = ledger.noise({"a": 1.0})
    uploads = {"a": np.array([[3.0, 4.0], [0.3, 0.4], [0.0, -10.0]])}
    clipped = noise.clip(uploads)["a"]
    np.testing.assert_allclose(np.linalg.norm(clipped, axis=1), [1.0, 0.5, 1.0])
    np.testing.assert_allclose(clipped[0], [0.6, 0.8])  # scaled, not cut value by value
    assert ledger.clipped == 2
    with pytest.raises(ValueError, match="clip for every upload"):
        noise.clip({"b": np.zeros((3, 1))})


def test_the_budget_refuses_sums_beyond_its_plan():
    ledger = ledger_for(Budget(4.0), {1.0: 2}, fleet=4, fraction=1.0, distributed=False)
    transport = SecureTransport({"a": 1.0}, 1.0, noise=ledger.noise({"a": 1.0}), secure=False)
    for _ in range(2):
        transport(np.arange(4), {"a": np.zeros((4, 2))})
    with pytest.raises(ValueError, match="privacy budget is spent"):
        transport(np.arange(4), {"a": np.zeros((4, 2))})


@pytest.mark.parametrize("bad, field", [({"epsilon": 0.0}, "dp_epsilon"), ({"epsilon": -1.0}, "dp_epsilon"),
                                        ({"epsilon": 1.0, "delta": 0.5}, "dp_delta")])
def test_bad_budgets_are_refused_naming_the_setting(bad, field):
    with pytest.raises(ValueError, match=field):
        Budget(**bad)


def test_a_dp_job_runs_pca_and_gmm_on_sums_and_is_refused_otherwise_naming_the_setting():
    from models.dictionary.spec import DictionaryJobSpec
    from models.mixture.spec import MixtureJobSpec
    from models.params import SettingError
    from models.pca.spec import PCAJobSpec

    for private in (False, True):  # the summed FedEM's noisy seeding and rounds (coordinator.mixture_job)
        MixtureJobSpec.from_dict({"features": list("abcdef"), "dp_epsilon": 4.0, "private": private})
    with pytest.raises(SettingError) as e:  # a family with no noisy sums
        DictionaryJobSpec.from_dict({"features": list("abcdef"), "dp_epsilon": 4.0})
    assert e.value.field == "dp_epsilon" and "PCA and gmm jobs" in str(e.value)
    with pytest.raises(SettingError) as e:  # PCA's noisy sums train FedMM's statistic whole
        PCAJobSpec.from_dict({"features": list("abcdef"), "dp_epsilon": 4.0, "algorithm": "fedpg"})
    assert e.value.field == "algorithm" and "differential privacy" in str(e.value)
    for private in (False, True):  # central noise, or the devices' shares
        PCAJobSpec.from_dict({"features": list("abcdef"), "dp_epsilon": 4.0, "algorithm": "fedmm", "private": private})
    for spec in (MixtureJobSpec, PCAJobSpec):
        with pytest.raises(SettingError) as e:
            spec(features=list("abcdef"), dp_epsilon=4.0, dp_delta=0.5).check_simulated()
        assert e.value.field == "dp_delta"
        spec(features=list("abcdef"), dp_epsilon=4.0).check_simulated()  # the simulation takes it


def fleet(n: int = 12, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    parts = [rng.normal(size=(60, 4)) * [1.0, 2.0, 0.5, 1.0] + i % 3 for i in range(n)]
    X_test = np.vstack([rng.normal(size=(100, 4)) + 1, rng.normal(size=(30, 4)) * 6])
    return parts, X_test, np.r_[np.zeros(100), np.ones(30)]


@pytest.mark.parametrize("secure", [False, True])
def test_private_pca_with_dp_reports_what_it_spent(secure):
    from models.detection.screening import Guard
    from models.pca.private import simulate_private_pca

    parts, X_test, y_test = fleet()
    out = simulate_private_pca(parts, X_test, y_test, ["a", "b", "c", "d"], 2, 0.99, Guard(), dp=Budget(8.0),
                               secure=secure)
    dp = out["dp"]
    assert dp["noise"] == ("distributed" if secure else "central") and out["private"] is secure
    assert dp["sums"] == {"all_devices": 5, "sampled": 0}
    assert dp["epsilon_spent"] <= 8.0 and dp["epsilon_spent"] == pytest.approx(8.0, rel=0.01)
    assert dp["noise_multiplier"] == pytest.approx(calibrate(8.0, 1e-5, [1.0] * 5))
    assert dp["clip_norms"] == {"m1": pytest.approx(8 * 2.0), "c2": pytest.approx(8 * 2.0), "C": 4.0, "h": 1.0,
                                "a": pytest.approx(0.05 * np.sqrt(33))}


def test_the_mixture_with_dp_spends_at_most_its_budget():
    parts, X_test, y_test = fleet(20)
    from models.mixture.simulator import simulate_mixture

    out = simulate_mixture(parts, X_test, y_test, ["a", "b", "c", "d"], rounds=10, fraction=0.2,
                           params={"components": 4}, dp=Budget(4.0))
    dp = out["dp"]
    assert dp["sums"]["sampled"] == 10 and dp["sums"]["all_devices"] >= 4  # statistics 2, seeding, threshold 2
    assert dp["epsilon_spent"] <= 4.0
    assert dp["epsilon_spent"] == pytest.approx(spent(dp["noise_multiplier"], [1.0] * dp["sums"]["all_devices"]
                                                      + [0.2] * 10, 1e-5))
    assert dp["epsilon_device_worst_unsampled"] >= dp["epsilon_spent"]
    assert np.isfinite(out["auc_roc"])


def test_a_device_clips_its_own_change_and_carries_the_rest():
    """With differential privacy's clips announced, every upload lies within them, and the server's sums stay the
    devices' (clipped) contributions: what a clip held back is sent in the device's later rounds."""
    from models.mixture.summed import SummedFedEM
    from tests.models.test_private_fedem import devices, train

    X = devices(9)
    alg = SummedFedEM(3, components=4, split_factor=2, min_support=2)
    alg.dp_clips = {"dR": 0.3, "dS1": 0.5, "dS2": 1.0, "dH": 1.0, "dN": 1.0, "dC": 20.0}  # tight: they bind
    norms: dict[str, float] = {}

    def receive(ids, uploads):
        for k, v in uploads.items():
            norms[k] = max(norms.get(k, 0.0), float(np.max(np.linalg.norm(v.reshape(len(v), -1), axis=1))))
        return uploads

    loop, pool, _ = train(alg, X, rounds=30, transport=receive)
    assert all(norms[k] <= alg.dp_clips[k] + 1e-9 for k in norms) and norms["dS2"] == pytest.approx(1.0)
    K = alg.components
    for name in ("R", "S1", "S2"):
        assert np.allclose(loop.server[name], pool.states[name][:, :K].sum(axis=0), atol=1e-9)


def test_the_noisy_threshold_without_noise_is_the_pooled_quantile():
    """The threshold's two sums (an anchor, then the fleet's exceedance at candidates around it) read the pooled
    q-quantile of the devices' held-out scores, to within the candidates' step (10^(1/8))."""
    from models.detection.private import noisy_tail
    from models.detection.threshold import sparse_histogram

    rng = np.random.default_rng(5)
    scores = [np.exp(rng.normal(i % 4 * 0.3, 1.0, 400)) for i in range(40)]
    ledger = Ledger(0.0, distributed=False, fleet=40, fraction=1.0)
    transport = SecureTransport({}, 1.0, noise=ledger.noise({}), secure=False)
    fleet, tail = noisy_tail([sparse_histogram(s) for s in scores], 0.99, 0.0, transport)
    pooled = np.quantile(np.concatenate(scores), 0.99)
    assert pooled / 10 ** (1 / 8) <= fleet <= pooled * 10 ** (1 / 8)
    assert ledger.released == [1.0, 1.0] and tail.prior > 100  # two sums; the strongest prior
