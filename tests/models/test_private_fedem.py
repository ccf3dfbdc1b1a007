"""Private mode's mixture (models.mixture.summed, models.private.transport): the coordinator's running sums are
exactly the devices' last contributions summed (their control variates moved to the devices), the seeding grows
the mixture from sums alone, and the secure sum (SecAgg+ in process, a third of the devices dropping after their
upload) changes nothing but fixed-point rounding."""

from __future__ import annotations

import numpy as np
import pytest

from models.core.rounds import BatchedPool, Hooks, Rounds, simulate
from models.mixture.control import SUPPORT_SHARE
from models.mixture.gmm import hard_stats, nearest
from models.mixture.simulator import device_data, simulate_mixture
from models.mixture.summed import GROW, SummedFedEM
from models.private.transport import SecureTransport

pytestmark = pytest.mark.filterwarnings("ignore")


def devices(n: int = 8, d: int = 3, seed: int = 0) -> list[np.ndarray]:
    """Non-i.i.d. devices: each mostly one of three clusters, of different sizes."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0] * d, [4.0] * d, [-4.0, 4.0, 0.0][:d]])
    return [np.vstack([rng.normal(centres[i % 3], 0.5, size=(40 + 10 * i, d)),
                       rng.normal(centres[(i + 1) % 3], 0.5, size=(5, d))]).astype(np.float32) for i in range(n)]


def train(alg: SummedFedEM, X: list[np.ndarray], rounds: int, fraction: float = 0.5, transport=None, seed: int = 0):
    claimed = np.array([len(x) for x in X], dtype=float)
    loop = Rounds.start(alg, len(X), fraction, np.random.default_rng(seed))
    loop.server.update({"cap.level": np.array(claimed.max()), "cap.scale": np.array(claimed.mean())})
    loop.broadcast = alg.with_caps(loop.server, loop.broadcast)
    pool = BatchedPool.of(alg, {**device_data(X, seed), "claimed": claimed}, loop.broadcast)
    seen: list[int] = []
    hooks = Hooks(receive=transport, observe=lambda ids, done: seen.append(len(ids)))
    simulate(loop, pool, claimed, rounds, hooks, everyone_while=lambda b: int(b["stage"]) == GROW)
    return loop, pool, seen


def test_the_running_sums_are_the_devices_last_contributions():
    X = devices()
    alg = SummedFedEM(3, components=4, split_factor=2, min_support=2)
    loop, pool, seen = train(alg, X, rounds=12)
    assert seen[:1] == [len(X)] and len(seen) > 12  # seeding rounds ask every device
    states = pool.states
    K = alg.components
    for name in ("R", "S1", "S2", "Q"):  # each device keeps W_i T_i; the server holds their sum, nothing per device
        assert np.allclose(loop.server[name], states[name][:, :K].sum(axis=0), atol=1e-9)
    assert np.allclose(states["Q"], states["R"] ** 2)  # and its squared masses (the mass share's bound)
    assert np.allclose(loop.server["support"], states["H"][:, :K].sum(axis=0))
    assert float(loop.server["devices"]) == len(X)
    # a device's contribution is its capped weight times its per-record statistics under the last mixture it saw
    assert not any(k.endswith("_rows") for k in loop.server)


def test_seeding_grows_k_components_from_sums_and_hands_over_exactly():
    X = devices(9)
    alg = SummedFedEM(3, components=3, split_factor=2, hard_rounds=100, min_support=1)
    loop, _, _ = train(alg, X, rounds=0)
    assert int(loop.broadcast["stage"]) == 2  # seeded: k-means rounds follow
    means = loop.broadcast["means"]
    for c in ([0.0] * 3, [4.0] * 3, [-4.0, 4.0, 0.0]):  # the three clusters found without anyone's centres
        assert np.min(np.linalg.norm(means - np.array(c), axis=1)) < 0.5
    # the aggregate is every device's hard statistics under the last seeding round's centres, weighted
    claimed = np.array([len(x) for x in X], dtype=float)
    w = np.minimum(claimed, claimed.max()) / claimed.mean()
    centres = means  # the M-step of the seeding's sums: its means are the seeding centres' records' means
    R = sum(wi * hard_stats(x.astype(float), nearest(x.astype(float), centres), 3)[0] / len(x) for wi, x in zip(w, X))
    assert np.allclose(np.sort(loop.server["R"]), np.sort(R), atol=1e-6)
    assert (loop.server["support"] == sum((hard_stats(x.astype(float), nearest(x.astype(float), centres), 3)[0]
                                           / len(x) >= SUPPORT_SHARE) for x in X)).all()


def test_the_secure_sum_changes_nothing_but_rounding_even_with_a_third_dropping():
    X = devices(9)
    params = {"components": 4, "split_factor": 2, "min_support": 2}
    plain, _, _ = train(SummedFedEM(3, **params), X, rounds=8)
    received: list[int] = []
    transport = SecureTransport({"dR": 1.0, "dS1": 8.0, "dS2": 64.0, "dH": 1.0, "dN": 1.0, "dC": 100.0, "dQ": 8.0},
                                2.0, dropout=1 / 3)

    def secure(ids, uploads):
        out = transport(ids, uploads)
        received.append(len(next(iter(out.values()))))
        return out

    private, _, _ = train(SummedFedEM(3, **params), X, rounds=8, transport=secure)
    assert set(received) == {1}  # the server step saw one summed upload a round, never a device's
    assert transport.sums == len(received) and transport.clipped == 0
    for key in ("means", "pi", "prec_chol"):
        assert np.allclose(plain.broadcast[key], private.broadcast[key], atol=1e-6), key
    assert (plain.broadcast["shared"] == private.broadcast["shared"]).all()


def test_a_device_clips_to_the_announced_bound_and_it_is_counted():
    transport = SecureTransport({"x": 1.0}, 1.0)
    out = transport(np.array([0, 1, 2]), {"x": np.array([[0.5, 3.0], [0.25, -0.5], [0.25, 0.0]])})
    assert np.allclose(out["x"], [[1.0, 0.5]], atol=1e-9)  # 3.0 clipped to 1.0 on its device
    assert transport.clipped == 1


def test_private_simulation_reports_its_cost_beside_plaintext():
    X = devices(10)
    y = np.r_[np.zeros(50), np.ones(10)]
    test = np.vstack([np.random.default_rng(5).normal(0, 0.5, size=(50, 3)),
                      np.random.default_rng(6).normal(12, 0.5, size=(10, 3))])
    names = ["a", "b", "c"]
    plain = simulate_mixture(X, test, y, names, rounds=10, fraction=0.5, params={"components": 4})
    private = simulate_mixture(X, test, y, names, rounds=10, fraction=0.5, params={"components": 4, "split_factor": 2},
                               private=True)
    assert plain["private"] is False and private["private"] is True
    for r in (plain, private):
        assert r["upload_bytes_per_device_round"] > 0 and r["auc_roc"] > 0.99
    assert private["all_device_rounds"] > 1 and private["secure_sum"]["clipped_values"] == 0
    with pytest.raises(ValueError, match="private mode trains fedem"):
        simulate_mixture(X, test, y, names, algorithm="centralized", private=True)
    with pytest.raises(ValueError, match="at least 2 devices a round"):
        simulate_mixture(X, test, y, names, fraction=0.1, private=True)


def test_a_private_job_takes_numeric_features_and_the_summed_fedem():
    from models.mixture.spec import MixtureJobSpec
    from models.params import SettingError

    assert MixtureJobSpec.from_dict({"features": ["a", "b"], "private": True}).private  # jobs run it over MQTT
    with pytest.raises(SettingError) as e:
        MixtureJobSpec.from_dict({"features": ["a", "b"], "private": True, "log_transform": False})
    assert e.value.field == "log_transform"
    MixtureJobSpec(features=["a", "b"], private=True).check_simulated()  # the simulation takes it


def test_the_threshold_phase_from_one_secure_sum_is_the_unwinsorised_fleet_tail():
    from models.detection.private import private_tail
    from models.detection.screening import fleet_tail
    from models.detection.threshold import sparse_histogram

    rng = np.random.default_rng(4)
    scores = [rng.gamma(2.0, 1.0 + 0.3 * i, size=40 + 15 * i) for i in range(7)]
    hists = [sparse_histogram(s) for s in scores]
    w = rng.uniform(0.5, 2.0, size=7)
    transport = SecureTransport({}, 2.0, dropout=1 / 3)
    threshold, tail = private_tail(hists, w, 0.95, 0.2, transport)
    reference, ref_tail = fleet_tail(hists, w, 0.95, 0.0, 0.2, colluders=0)
    assert threshold == pytest.approx(reference, rel=1e-9)
    assert np.allclose(tail.thresholds, ref_tail.thresholds, rtol=1e-9) and tail.prior == pytest.approx(ref_tail.prior)
    assert transport.phase_bytes > 0


@pytest.mark.parametrize("q, gap", [(0.9, False), (0.99, False), (0.99, True)])
def test_the_threshold_over_the_window_is_the_threshold_over_the_whole_grid(q, gap):
    """The threshold's sum covers only the window the coarse sum finds (`tail_window`): the threshold and the tail read
    from it are those of the same sum over the whole grid, exactly, with a fraction of its values. `gap`: most
    records far below a spike the tail starts in, so that the window's lowest coarse bin is empty and the curve
    before it comes from the fine bin under the window."""
    from models.detection.private import (
        dense_histograms,
        tail_from,
        tail_uploads,
        tail_window,
        window_uploads,
    )
    from models.detection.threshold import EDGES, sparse_histogram

    rng = np.random.default_rng(5)

    def gapped(n: int) -> np.ndarray:  # 83 % far below, 5 % on one score, the rest above it
        low, spike = int(0.83 * n), int(0.05 * n)
        return np.concatenate([rng.lognormal(np.log(0.01), 0.3, low), np.full(spike, 10.0),
                               rng.lognormal(np.log(20.0), 0.3, n - low - spike)])

    scores = [gapped(100 + 20 * i) if gap else rng.lognormal(1.0 + 0.1 * i, 0.6, size=60 + 20 * i)
              for i in range(9)] + [np.zeros(0)]
    dense = dense_histograms([sparse_histogram(s) for s in scores])
    w = rng.uniform(0.5, 2.0, size=len(scores))

    def summed(uploads):
        return {k: v.sum(axis=0, keepdims=True) for k, v in uploads.items()}

    window = tail_window(summed(window_uploads(dense, w)), q)
    whole, tail = tail_from(summed(tail_uploads(dense, w)), None, q, 0.2)
    narrow, narrow_tail = tail_from(summed(tail_uploads(dense, w, window)), window, q, 0.2)
    assert narrow == whole and narrow_tail.prior == tail.prior
    np.testing.assert_array_equal(narrow_tail.thresholds, tail.thresholds)
    np.testing.assert_array_equal(narrow_tail.exceedances, tail.exceedances)
    assert window[0] > 0 and window[1] - window[0] < (len(EDGES) - 1) / 8
    assert not gap or not dense[:, window[0] + 1: window[0] + 65].any()  # the window's lowest coarse bin is empty


def test_a_round_too_few_devices_unmask_fails_cleanly_and_the_job_goes_on():
    """Two thirds of one round's devices vanish after uploading: the sum cannot be unmasked, the round fails,
    nothing of it counts (server and devices keep their sums), and the next rounds go on."""

    class OneBadRound(SecureTransport):
        def __call__(self, ids, uploads):
            self.dropout = 0.7 if self.sums == 12 else 0.0
            return super().__call__(ids, uploads)

    X = devices(9)
    transport = OneBadRound({"dR": 1.0, "dS1": 8.0, "dS2": 64.0, "dH": 1.0, "dN": 1.0, "dC": 100.0, "dQ": 8.0}, 2.0)
    alg = SummedFedEM(3, components=4, split_factor=2, min_support=2)
    loop, pool, seen = train(alg, X, rounds=8, fraction=1.0, transport=transport)
    assert transport.failures == 1 and transport.clipped == 0
    assert transport.sums == len(seen) + 1  # every round was summed; one of them is not among those that counted
    K = alg.components
    for name in ("R", "S1", "S2"):  # the failed round left no half-applied change anywhere
        assert np.allclose(loop.server[name], pool.states[name][:, :K].sum(axis=0), atol=1e-6)
    assert int(loop.broadcast["stage"]) in (1, 2)


def test_private_pca_is_the_pooled_subspace_from_one_secure_sum():
    from models.pca.simulator import simulate_pca

    rng = np.random.default_rng(2)
    mix = np.array([[1.0, 0.9, 0.0, 0.1], [0.0, 0.2, 1.0, 0.5], [0.3, 0.0, 0.1, 1.0], [0.1, 0.1, 0.1, 0.1]])
    # non-i.i.d.: each device stretches another direction, and sizes differ (the pooled moment weighs them)
    # (12 devices: in a smaller fleet the weight caps make every device weigh the same)
    parts = [np.abs(rng.normal(size=(40 + 30 * i, 4)) * (1 + 4 * np.eye(4)[i % 4]) @ mix) * 100 for i in range(12)]
    test = np.vstack([np.abs(rng.normal(size=(50, 4)) @ mix) * 100, rng.uniform(0, 1e5, size=(10, 4))])
    y = np.r_[np.zeros(50), np.ones(10)]
    names = ["a", "b", "c", "d"]
    private = simulate_pca(parts, test, y, names, rank=2, private=True, dropout=1 / 3)
    pooled = simulate_pca(parts, test, y, names, "centralized", rank=2)
    assert private["private"] and private["subspace_distance"] < 1e-6  # the exact pooled subspace, to rounding
    assert private["auc_roc"] == pytest.approx(pooled["auc_roc"], abs=1e-9)
    assert private["secure_sum"]["clipped_values"] == 0 and private["upload_bytes_per_device_round"] > 0
    with pytest.raises(ValueError, match="linear PCA"):
        simulate_pca(parts, test, y, names, rank=2, private=True, kernel="rff")


def test_seeding_makes_no_component_of_a_handful_of_records():
    """Three far-out records on one device: splitting would give them a centre of their own, whose covariance of
    3 records makes ordinary traffic beside it look anomalous (and is close to raw records); a centre needs
    max(min_cluster, d + 1) records of the fleet to live, so their records join another component."""
    X = devices(9)
    X[0] = np.vstack([X[0], np.full((3, 3), 20.0, dtype=np.float32)])
    alg = SummedFedEM(3, components=8, min_support=1)
    loop, _, _ = train(alg, X, rounds=0)
    assert alg.least_records == 5
    means = loop.broadcast["means"][loop.broadcast["pi"] > 1e-4]
    assert np.min(np.linalg.norm(means - 20.0, axis=1)) > 1.0, means


def swap_fleet(devices: int = 6, per: int = 40, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every device holds components 0 and 1 (two near groups: the cheapest pair to merge), 2 (two far clumps with
    nothing between: the broad one) and 3 (a group of its own), with their labels."""
    rng = np.random.default_rng(seed)
    groups = {0: [(0.0, 0.0)], 1: [(0.5, 0.0)], 2: [(-20.0, 10.0), (20.0, 10.0)], 3: [(0.0, 30.0)]}
    X, labels = [], []
    for _ in range(devices):
        parts = [(rng.normal(c, 0.5, (per, 2)), k) for k, cs in groups.items() for c in cs]
        X.append(np.vstack([p for p, _ in parts]))
        labels.append(np.concatenate([np.full(len(p), k) for p, k in parts]))
    return X, labels


def test_a_swap_in_private_mode_keeps_the_sums_of_the_devices_contributions_and_plaintexts_table():
    """A swap decided on the running sums merges the pair in them and, through the broadcast, in each device's own
    contribution before its next difference (those that answer only later too): the sums stay exactly the sum of
    the devices' contributions, and the statistics plaintext FedEM's table holds after the same swap."""
    from models.mixture import control
    from models.mixture.fedem import FedEM, broadcast_of, mixture_of
    from models.mixture.summed import merged

    X, labels = swap_fleet()
    n, K = len(X), 4
    weight = np.linspace(0.5, 1.5, n) / n
    per = [tuple(s / len(x) for s in hard_stats(x, lab, K)) for x, lab in zip(X, labels)]
    rows = tuple(np.stack([p[i] for p in per]) for i in range(3))
    scale = np.array(float(sum(len(x) for x in X)))  # records per unit of weighted mass
    # plaintext: the table of every device's rows, four k-means rounds after seeding
    plain = FedEM(2, components=K, reg=1e-3, float32=False, splits=1, min_support=1)
    table, _ = plain.init_server(n, np.random.default_rng(0))
    control.write(table, np.arange(n), weight, rows, 1)
    table.update({"stage": np.array(1), "em_round": np.array(4), "cap.scale": scale})
    plain.keep(table, broadcast_of(plain.aggregate(table), 2))
    # private: each device holds its weighted contribution, the server their sums only
    alg = SummedFedEM(2, components=K, reg=1e-3, splits=1, min_support=1)
    server, _ = alg.init_server(n, np.random.default_rng(0))
    states = {"R": weight[:, None] * rows[0], "S1": weight[:, None, None] * rows[1],
              "S2": weight[:, None, None] * rows[2], "H": (rows[0] >= SUPPORT_SHARE).astype(float),
              "joined": np.ones(n), "merged": np.zeros(n), "nll": np.zeros(n)}
    states["Q"] = states["R"] ** 2
    server.update({"stage": np.array(1), "em_round": np.array(4), "cap.scale": scale, "devices": np.array(float(n)),
                   **{k: states[k].sum(axis=0) for k in ("R", "S1", "S2", "Q")}, "support": states["H"].sum(axis=0)})
    broadcast = alg.keep(server, broadcast_of(alg.aggregate(server), 2))[1]

    def answer(ids: np.ndarray, broadcast: dict) -> dict:
        """These devices' client step (plaintext's upload too), the private and the plaintext server steps."""
        records = np.empty(len(ids), dtype=object)
        records[:] = [X[i] for i in ids]
        data = {"X": records, "claimed": weight[ids]}
        after, up = alg.client_update({k: v[ids] for k, v in states.items()}, data, broadcast)
        for k, v in after.items():
            states[k][ids] = v
        stats = [plain.round_statistics(X[i], mixture_of(plain.current(table)), 2)[:3] for i in ids]
        plain.server_update(table, ids, {k: np.stack([s[j] / len(X[i]) for s, i in zip(stats, ids)])
                                         for j, k in enumerate(("R", "S1", "S2"))}, weight[ids])
        return alg.server_update(server, ids, up, weight[ids])[1]

    def contributions() -> dict:
        """Every device's contribution as the server's sums hold it (merged as it will merge it when it answers)."""
        each = [merged({k: v[i: i + 1] for k, v in states.items()}, alg.current(server))[0] for i in range(n)]
        return {k: sum(e[k][0] for e in each) for k in ("R", "S1", "S2", "H", "Q")}

    first = np.array([0, 2, 4])
    broadcast = answer(first, broadcast)  # round 5 ends with a swap
    assert int(server["swaps"]) == 1 and int(table["swaps"]) == 1
    a, b = (int(v) for v in server["merges"][0])
    assert sorted((a, b)) == [0, 1]  # the near pair merged, as plaintext's table
    assert (broadcast["merges"] == server["merges"]).all()
    np.testing.assert_allclose(broadcast["means"], plain.current(table)["means"], atol=1e-9)  # the same split
    for k, v in contributions().items():
        np.testing.assert_allclose(server["support" if k == "H" else k], v, atol=1e-12)
    for k, v in zip(("R", "S1", "S2"), control.aggregate(table)):
        np.testing.assert_allclose(server[k], v, atol=1e-12)
    assert states["R"][1][b] != 0  # a device that did not answer has not merged yet: the sums hold it merged
    later = np.array([1, 3, 5])
    answer(later, broadcast)  # they merge, then send their change
    assert (states["merged"][later] == 1).all() and (states["merged"][first] == 0).all()
    assert states["R"][later][:, b].any()  # the split's new half: their records nearest to it
    for k, v in contributions().items():
        np.testing.assert_allclose(server["support" if k == "H" else k], v, atol=1e-12)
    answer(first, broadcast)  # and the first ones merge theirs: every contribution is now merged
    for k in ("R", "S1", "S2", "H", "Q"):
        np.testing.assert_allclose(server["support" if k == "H" else k], states[k].sum(axis=0), atol=1e-12)
    for k, v in zip(("R", "S1", "S2"), control.aggregate(table)):
        np.testing.assert_allclose(server[k], v, atol=1e-12)


def test_a_support_change_after_merges_reaches_the_sum_unclipped():
    """A device that answers after merges counts once per component merged into a column (its contribution as the
    sums hold it), so its next change there may be -(1 + swaps): the secure sum makes room for it, exactly."""
    from models.mixture.summed import summed_scales, summed_transport

    assert [summed_scales(1.0, s)["dH"] for s in (0, 1, 2, 3, 18)] == [1.0, 2.0, 4.0, 4.0, 32.0]
    transport = summed_transport(1.0, 0, 0.0, swaps=2)
    out = transport(np.array([0, 1]), {"dH": np.array([[-3.0, 1.0], [1.0, 1.0]])})
    assert transport.clipped == 0 and (out["dH"] == [[-2.0, 2.0]]).all()  # exact: counts meet the rule's bound


def test_the_mass_share_is_bounded_from_summed_squared_masses():
    """Private mode's mass share: from the sums of the devices' masses and squared masses, a bound on the share of
    a component's mass its heaviest devices hold (never below it), which keeps out what two devices hold most of and
    shares what many hold alike."""
    from models.mixture.summed import mass_shares

    rng = np.random.default_rng(0)
    masses = rng.pareto(1.5, size=(200, 30))  # 200 components over 30 devices, some held by few
    top2 = np.sort(masses, axis=1)[:, -2:].sum(axis=1) / masses.sum(axis=1)
    bound = mass_shares(masses.sum(axis=1), (masses**2).sum(axis=1), 2)
    assert (bound >= top2 - 1e-12).all() and (bound <= 1 + 1e-12).all()
    alg = SummedFedEM(2, components=2, min_support=3)
    spread = np.full(20, 0.05)  # component 0: 20 devices alike; component 1: two devices hold 90 %
    owned = np.r_[0.45, 0.45, np.full(18, 0.1 / 18)]
    server = {"stage": np.array(1), "devices": np.array(20.0), "support": np.array([20.0, 20.0]),
              "R": np.array([spread.sum(), owned.sum()]), "Q": np.array([(spread**2).sum(), (owned**2).sum()])}
    assert alg.shared(server).tolist() == [True, False]
    assert SummedFedEM(2, components=2, min_support=3, mass_cap=1.0).shared(server).tolist() == [True, True]
    assert "dQ" in alg.upload_shapes({"stage": np.array(2)}) and alg.squares
    alg.dp_clips = {"dR": 1.0}  # differential privacy: no squared masses (not among the noised sums)
    assert "dQ" not in alg.upload_shapes({"stage": np.array(2)})


def test_a_private_swap_does_not_split_a_component_its_halves_would_leave_unsupported():
    """The summed server decides a swap with the summed support count (models.mixture.swaps.keeps_support): a broad
    component every device supports with 2 of its 362 records does not split (each half: 1 record, below
    SUPPORT_SHARE); with 4 in each clump it does."""
    def server_of(clump: int) -> tuple[SummedFedEM, dict]:
        X, labels = swap_fleet(per=120)
        keep = [np.flatnonzero(lab != 2).tolist() + np.flatnonzero(lab == 2)[[*range(clump), *range(120, 120 + clump)]]
                .tolist() for lab in labels]
        X, labels = [x[k] for x, k in zip(X, keep)], [lab[k] for lab, k in zip(labels, keep)]
        per = [tuple(s / len(x) for s in hard_stats(x, lab, 4)) for x, lab in zip(X, labels)]  # each device weighs 1
        alg = SummedFedEM(2, components=4, reg=1e-3, splits=1, min_support=1)
        server, _ = alg.init_server(len(X), np.random.default_rng(0))
        server.update({"stage": np.array(1), "em_round": np.array(5), "devices": np.array(float(len(X))),
                       "cap.scale": np.array(float(len(X[0]))),
                       **{k: np.sum([p[i] for p in per], axis=0) for i, k in enumerate(("R", "S1", "S2"))},
                       "support": np.sum([p[0] >= SUPPORT_SHARE for p in per], axis=0).astype(float)})
        return alg, server

    alg, server = server_of(1)
    assert server["support"][2] == 6 and alg.swap(server) is None and "merges" not in server
    alg, server = server_of(4)
    assert alg.swap(server) is not None and len(server["merges"]) == 1


def test_noisy_support_counts_that_leave_no_component_shared_share_every_component():
    """With differential privacy the support rule reads noisy counts: where the noise swamps them (a small fleet) and
    no component reaches the count, every component is shared (the devices refuse a model with none); without noise,
    or where one component passes, the rule stands."""
    from models.core.pipeline import support_mask
    from models.mixture.summed import dp_clips

    alg = SummedFedEM(2, components=3, min_support=3)
    server = {"stage": np.array(1), "devices": np.array(8.0), "support": np.array([-4.0, 1.5, 2.0]),
              "R": np.ones(3)}
    assert not support_mask(alg.support_view(server)).any()  # without noise: the rule keeps every one out
    alg.dp_clips = dp_clips(2, alg.least_records)
    assert support_mask(alg.support_view(server)).all()
    server["support"] = np.array([-4.0, 3.2, 2.0])
    assert support_mask(alg.support_view(server)).tolist() == [False, True, False]
