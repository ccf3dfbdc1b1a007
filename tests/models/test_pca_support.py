"""PCA's support phase (issue 22, FedMM `support_trim`, models.pca.support): records no other device's traffic
explains stay out of the shared subspace, so a compliant rogue's attacks stop being normal for the fleet."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from fedsentry.cli import build_parser
from fedsentry.errors import UsageError
from fedsentry.runs.detection import prepare, simulate
from models.params import SettingError
from models.pca.simulator import simulate_pca
from models.pca.spec import PCAJobSpec
from models.pca.support import kept

pytestmark = pytest.mark.filterwarnings("ignore")


def run(*flags: str) -> dict:
    """`fedsentry simulate pca --detector pca --algorithm fedmm --dataset synthetic --clients 11` for 10 rounds of
    half the fleet."""
    logging.disable(logging.WARNING)
    args = build_parser().parse_args(["simulate", "pca", "--detector", "pca", "--algorithm", "fedmm", "--dataset",
                                      "synthetic", "--clients", "11", "--rounds", "10", "--fraction", "0.5", *flags])
    data, split, parts = prepare(args)
    return simulate(args, "fedmm", data, split, parts)


def test_the_support_phase_keeps_a_compliant_rogues_attacks_out_of_normal():
    """1 of 11 devices trains honestly on its normals plus 300 attack records: as it is, FedMM learns them as normal
    (caught falls from 40 % to 10 %); with the support phase it catches ≥ 0.9 × the clean fleet's, at an AUC no
    lower than the clean fleet's less 0.02."""
    clean, rogue = run(), run("--adversaries", "1", "--attack", "compliant")
    assert rogue["recall"] < 0.5 * clean["recall"]  # the attack works on the fleet as it is
    guarded = run("--support-trim", "--adversaries", "1", "--attack", "compliant")
    assert guarded["recall"] >= 0.9 * clean["recall"], (guarded["recall"], clean["recall"])
    assert guarded["auc_roc"] >= clean["auc_roc"] - 0.02, (guarded["auc_roc"], clean["auc_roc"])
    assert len(guarded["history"]) == 11  # the rounds and the round of every device after the support phase


def spiked(rng: np.random.Generator, rogues: int, d: int = 6, n: int = 400, devices: int = 8):
    """Devices with isotropic records in the first d - 1 coordinates; the first `rogues` also hold n / 4 records far
    along the last one, which no other device has."""
    X = [np.c_[rng.standard_normal((n, d - 1)), 0.1 * rng.standard_normal(n)] for _ in range(devices)]
    for i in range(rogues):
        spike = np.zeros((n // 4, d))
        spike[:, -1] = 10 + rng.standard_normal(n // 4)
        X[i] = np.vstack([X[i], spike])
    C = np.stack([x.T @ x / len(x) for x in X])
    return X, C, np.ones(devices)


def test_a_device_keeps_only_what_the_others_explain(rng):
    X, C, w = spiked(rng, rogues=1)
    mine = kept(X[0], C, w, own=0, cap=12.0, rank=2, colluders=2)
    assert not mine[-100:].any() and mine[:-100].mean() > 0.95  # its spike out, its ordinary records in
    honest = kept(X[3], C, w, own=3, cap=12.0, rank=2, colluders=2)
    assert honest.mean() > 0.97


def test_two_colluders_explain_each_other_unless_the_partner_is_left_out(rng):
    """Two rogues sharing the spike: leaving out only the device's own statistic, the other rogue's explains its
    attacks; leaving out too the device whose statistic explains most of its own (colluders 2) takes them out."""
    X, C, w = spiked(rng, rogues=2)
    assert kept(X[0], C, w, own=0, cap=12.0, rank=2, colluders=1)[-100:].mean() > 0.9
    assert not kept(X[0], C, w, own=0, cap=12.0, rank=2, colluders=2)[-100:].any()


def test_where_the_support_phase_cannot_run_it_is_refused_by_name():
    with pytest.raises(SettingError, match=r"algorithm_params\.support_trim: the support phase runs in the "
                                           "simulator only"):
        PCAJobSpec.from_dict({"features": ["a", "b", "c"], "rank": 1, "algorithm": "fedmm",
                              "algorithm_params": {"support_trim": True}})
    args = build_parser().parse_args(["simulate", "pca", "--detector", "pca", "--algorithm", "fedpg", "--dataset",
                                      "synthetic", "--clients", "3", "--support-trim"])
    with pytest.raises(UsageError, match="--support-trim: not a parameter of fedpg"):
        simulate(args, "fedpg", *prepare(args))
    X = np.random.default_rng(0).standard_normal((200, 3))
    with pytest.raises(ValueError, match="support_trim needs each device's statistic on the server"):
        simulate_pca([X[:100], X[100:]], X, np.zeros(200), ["a", "b", "c"], "fedmm", rank=1,
                     params={"support_trim": True}, private=True)


def test_what_a_device_leaves_out_weighs_nothing_and_what_it_keeps_weighs_as_before(rng):
    """The support phase's statistic is the sum over the kept records over all of them: never above the device's own
    second moment (so within what its statistics phase bounded), and the rogue's spike is gone from it."""
    from models.pca import FedMM
    from models.pca.simulator import prepare_clients, support_phase

    X, _, _ = spiked(rng, rogues=1)
    d = X[0].shape[1]
    clients = prepare_clients(X, [f"f{j}" for j in range(d)], log_transform=False)
    alg = FedMM(d, 2, support_trim=True)
    server, broadcast = alg.init_server(len(X), rng)
    ids = np.arange(len(X))
    server, broadcast = alg.server_update(server, ids, {"S": clients.C @ broadcast["Q"]}, clients.weight)
    after = support_phase(alg, server, broadcast, clients, 0.99)
    assert min(np.linalg.eigvalsh(c - a)[0] for c, a in zip(clients.C, after)) > -1e-9
    assert after[0][-1, -1] < 0.1 * clients.C[0][-1, -1]  # the spike (the last feature) left out
    assert np.trace(after[3]) > 0.9 * np.trace(clients.C[3])  # an honest device keeps nearly everything
