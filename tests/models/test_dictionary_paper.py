"""Seed 003 Sec. 6 in small (models.dictionary.paper; `fedsentry simulate dict --paper` draws the figures):
on heterogeneous clients the parameter-space ("naive") algorithm ends above FedMM, and control variates
(alpha 0.01) end at most half of alpha 0's surrogate change E_s."""

from __future__ import annotations

import numpy as np

from models.dictionary.paper import figures, synthetic
from models.partition import balanced_split


def test_fedmm_beats_naive_and_control_variates_halve_the_surrogate_change_when_heterogeneous():
    rng = np.random.default_rng(0)
    parts = balanced_split(synthetic(10, 6, 1000, rng), 10, rng)
    assert [len(p) for p in parts] == [100] * 10
    out = figures({"heterogeneous": parts}, 6, 100, 1, beta=0.5, every=10)["heterogeneous"]

    def end(run: str, key: str) -> float:
        return float(np.mean(out[run][key][-3:]))

    assert end("fig1_naive", "objective") > end("fig1_fedmm", "objective") + 0.1
    assert end("fig1_fedmm", "objective") < 0.6 * out["fig1_fedmm"]["objective"][0]  # it learned
    assert end("fig2_alpha_0.01", "surrogate_change") <= 0.5 * end("fig2_alpha_0", "surrogate_change")


def test_balanced_split_keeps_clusters_apart():
    rng = np.random.default_rng(1)
    Z = np.r_[rng.normal(-5, 1, (60, 2)), rng.normal(5, 1, (60, 2))]
    parts = balanced_split(Z, 2, rng)
    assert sorted(len(p) for p in parts) == [60, 60]
    assert {np.sign(p[:, 0].mean()) for p in parts} == {-1.0, 1.0} and all(np.abs(p[:, 0]).min() > 0 for p in parts)
