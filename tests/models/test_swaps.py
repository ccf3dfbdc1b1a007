"""Split-and-merge in the k-means rounds (models.mixture.swaps): the broad component splits, the cheapest pair
merges in every device's row, the table still holds each device's statistics, and a round of such a step stores
every row it changed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from models.mixture import control
from models.mixture.fedem import FedEM
from models.mixture.gmm import hard_stats, nearest
from models.mixture.swaps import SPLIT_EVERY, merge_pair, moments, plan, split_target, swap, swap_due

#: components: 0 and 1 two near groups (cheapest to merge), 2 two far clumps with nothing between (broad),
#: 3 a group of its own
CENTRES = {0: [(0.0, 0.0)], 1: [(0.5, 0.0)], 2: [(-20.0, 10.0), (20.0, 10.0)], 3: [(0.0, 30.0)]}


def device_rows(devices: int = 6, per: int = 40, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each device's records (every group on every device) and their components."""
    rng = np.random.default_rng(seed)
    X, labels = [], []
    for _ in range(devices):
        parts = [(rng.normal(c, 0.5, (per, 2)), k) for k, cs in CENTRES.items() for c in cs]
        X.append(np.vstack([p for p, _ in parts]))
        labels.append(np.concatenate([np.full(len(p), k) for p, k in parts]))
    return X, labels


def table(X: list[np.ndarray], labels: list[np.ndarray], weight: np.ndarray) -> tuple[FedEM, dict]:
    alg = FedEM(2, components=4, reg=1e-3, float32=False, splits=1)
    server, _ = alg.init_server(len(X), np.random.default_rng(0))
    stats = [hard_stats(x, lab, 4) for x, lab in zip(X, labels)]
    per = [tuple(s / len(x) for s in st) for st, x in zip(stats, X)]
    control.write(server, np.arange(len(X)), weight, tuple(np.stack([p[i] for p in per]) for i in range(3)), 1)
    server["cap.scale"] = np.array(1.0 / len(X[0]))  # records per unit of weighted mass
    return alg, server


def test_the_broad_component_splits_and_the_cheapest_pair_merges():
    X, labels = device_rows()
    R, S1, S2 = (np.sum([hard_stats(x, lab, 4)[i] for x, lab in zip(X, labels)], axis=0) for i in range(3))
    means, _, logdet = moments(R, S1, S2, 1e-3)
    assert split_target(R, logdet, R, least=5, d=2) == 2
    assert sorted(merge_pair(R, S1, S2, 1e-3, means, logdet, avoid=2)) == [0, 1]
    # nothing far broader than the others: nothing to split
    calm = [x[lab != 2] for x, lab in zip(X, labels)]
    R, S1, S2 = (np.sum([hard_stats(x, lab[lab != 2], 4)[i] for x, lab in zip(calm, labels)], axis=0)
                 for i in range(3))
    assert split_target(R, moments(R, S1, S2, 1e-3)[2], R, least=5, d=2) is None


def test_components_with_a_trace_of_mass_merge_quietly():
    """Mass above 0 but below `moments`' live bar: a log-determinant of -inf, and two such components' pair too;
    the merge treats them as empty (their merges lose nothing, -inf minus -inf is not asked of numpy: its
    'invalid value' warning stood in every grid's log) and merges one of them."""
    X, labels = device_rows()
    R, S1, S2 = (np.sum([hard_stats(x, lab, 4)[i] for x, lab in zip(X, labels)], axis=0) for i in range(3))
    R, S1, S2 = R.copy(), S1.copy(), S2.copy()
    for k in (1, 3):
        S1[k], S2[k], R[k] = S1[k] * 1e-20 / R[k], S2[k] * 1e-20 / R[k], 1e-20
    means, _, logdet = moments(R, S1, S2, 1e-3)
    assert logdet[1] == logdet[3] == -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert {1, 3} & set(merge_pair(R, S1, S2, 1e-3, means, logdet, avoid=2))


def test_a_swap_keeps_every_row_the_statistics_of_its_device_and_splits_between_the_clumps():
    X, labels = device_rows()
    weight = np.linspace(0.5, 1.5, len(X)) / len(X)
    alg, server = table(X, labels, weight)
    before = {k: server[f"{k}_rows"][: len(X)].copy() for k in control.STATS}
    m = swap(server, 1e-3, 1.0 / server["cap.scale"], 5)
    assert m is not None and int(server["swapped"]) == 1
    n = int(server["rows"])
    # the merged pair: one column holds both, the other is empty, in every row; the other columns untouched
    merged = [k for k in (0, 1) if server["R_rows"][:n, k].any()]
    assert len(merged) == 1
    free = 1 - merged[0]
    for k in control.STATS:
        rows = server[f"{k}_rows"][:n]
        np.testing.assert_allclose(rows[:, merged[0]], before[k][:, 0] + before[k][:, 1], atol=1e-12)
        np.testing.assert_array_equal(rows[:, free], 0)
        np.testing.assert_array_equal(rows[:, 2:], before[k][:, 2:])
        # each device's row still adds up to its own moments, and the sums are the table's
        np.testing.assert_allclose(rows.sum(axis=1), before[k].sum(axis=1), atol=1e-12)
        np.testing.assert_allclose(server[k], np.tensordot(server["W_rows"][:n], rows, axes=1), atol=1e-12)
    np.testing.assert_array_equal(server["support"], server["H_rows"][:n].sum(axis=0))
    # the broad component and the freed one: one mean toward each clump, so the next k-means round separates them
    for x, lab in zip(X, labels):
        got = nearest(x[lab == 2], m.means)
        left = x[lab == 2][:, 0] < 0
        assert set(got.tolist()) == {2, free}
        assert len(set(got[left].tolist())) == 1 and len(set(got[~left].tolist())) == 1
    # a round with a swap stores every row it changed: all of them
    assert (alg.touched(server, np.array([0]))["R_rows"] == np.arange(n)).all()


def test_swaps_run_every_few_rounds_and_end_while_the_devices_can_still_answer():
    due = [r for r in range(1, 200) if swap_due(r, 3)]
    assert due == [SPLIT_EVERY, 2 * SPLIT_EVERY, 3 * SPLIT_EVERY]
    assert not any(swap_due(r, 0) for r in range(1, 200))
    # by default, as many as end 1 / fraction rounds before the job's last: 100 rounds at 10 %: the last at 90
    alg = FedEM(2, rounds=100, fraction=0.1)
    assert alg.last_swap == 90 and alg.splits == 90 // SPLIT_EVERY
    assert max(r for r in range(1, 101) if swap_due(r, alg.splits, alg.last_swap)) == 90
    short = FedEM(2, rounds=30, fraction=0.3)  # a job's defaults: the last swap 4 rounds before its end
    assert [r for r in range(1, 31) if swap_due(r, short.splits, short.last_swap)] == [5, 10, 15, 20, 25]
    assert FedEM(2).splits == 0  # the job's rounds unknown (a device): none
    assert FedEM(2, rounds=100, fraction=0.1, splits=2).splits == 2
    with pytest.raises(ValueError, match="splits"):
        FedEM(2, splits=-1)
    with pytest.raises(ValueError, match="fraction"):
        FedEM(2, rounds=10, fraction=0)


def test_private_mode_makes_swaps_as_plaintext_does():
    """Private mode decides its swaps on its sums (models.mixture.summed.SummedFedEM.swap) and takes the same
    setting: as many as the job's rounds leave room for by default, `splits` when asked, 0 for none; a job
    asking for them is no longer refused."""
    from models.mixture.spec import MixtureJobSpec
    from models.mixture.summed import SummedFedEM

    assert SummedFedEM(3, splits=2).splits == 2 and SummedFedEM(3, splits=0).splits == 0
    assert SummedFedEM(3, rounds=100, fraction=0.1).splits == FedEM(3, rounds=100, fraction=0.1).splits == 18
    spec = MixtureJobSpec.from_dict({"features": ["a", "b"], "private": True, "algorithm_params": {"splits": 2}})
    assert spec.private and spec.algorithm_params["splits"] == 2


def test_a_component_whose_halves_would_lose_their_supporters_does_not_split():
    """Issue 23's 11-device regression: a swap split a thinly supported component (rare normal traffic on several
    devices) into halves no device supports, and that traffic left the fleet's model (and every device's own
    components). A device supports a component with SUPPORT_SHARE of its records in it."""
    def shares(clump: int) -> tuple[np.ndarray, ...]:
        rng = np.random.default_rng(0)
        R, S1, S2, H = np.zeros(4), np.zeros((4, 2)), np.zeros((4, 3)), np.zeros(4)
        for _ in range(6):  # each device: 120 records in each of groups 0, 1, 3 and `clump` in each of 2's clumps
            parts = [(rng.normal(c, 0.5, (120 if k != 2 else clump, 2)), k) for k, cs in CENTRES.items() for c in cs]
            x, lab = np.vstack([p for p, _ in parts]), np.concatenate([np.full(len(p), k) for p, k in parts])
            r, s1, s2 = hard_stats(x, lab, 4)
            R, S1, S2 = R + r / len(x), S1 + s1 / len(x), S2 + s2 / len(x)  # a device weighs 1
            H += r / len(x) >= control.SUPPORT_SHARE
        return R, S1, S2, H

    # one record in each clump: 2 of 362 records support component 2 on every device, 1 in a half would not
    R, S1, S2, H = shares(1)
    logdet = moments(R, S1, S2, 1e-3)[2]
    assert H[2] == 6 and split_target(R, logdet, R * 362, least=1, d=2) == 2  # broad, as before
    assert split_target(R, logdet, R * 362, least=1, d=2, support=H) is None
    assert plan(R, S1, S2, 1e-3, 362, 1, H) is None
    # four in each clump: each half keeps its supporters, and it splits
    R, S1, S2, H = shares(4)
    assert split_target(R, moments(R, S1, S2, 1e-3)[2], R * 368, least=1, d=2, support=H) == 2
