"""Issue 26 point 5: does FedMM-OT after the per-feature monotone (quantile) start help A's detector? Fleet B as in
benchmarks/otmap_drift.py (no attacks in its training records); after the quantile map onto Q, FedMM-OT from its
near-identity start with fewer rounds and a smaller step than the drift benchmark's 50 rounds at lr 0.1 / features.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_quantile_refine.py [datasets...]

writes benchmarks/results/otmap-quantile-refine.md (FP / recall / per-device FP spread on B's test records, %)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from otmap_drift import DEVICES_PER_SITE, HIDDEN, devices_of, drift, measure, two_sites

from fedsentry.data.datasets import load_named, train_test_split
from models.mixture.detector import MixtureDetector
from models.otmap.fedmm import FedMMOT
from models.otmap.field import MappedDetector, mixture_samples
from models.otmap.quantile import histogram, quantile_map
from models.otmap.simulator import train

#: (rounds, step as a multiple of the default lr 0.1 / features)
SETTINGS = ((0, 1.0), (5, 1.0), (50, 1.0), (5, 0.1), (50, 0.1))


def rows(name: str, seed: int = 0) -> list[str]:
    data = load_named(name, seed=seed)
    names, split = data.feature_names, train_test_split(data, seed=seed)
    det = MixtureDetector(seed=seed).fit(split.X_train, names)
    pre, rng = det.preprocessor_, np.random.default_rng(seed)
    P, B_test = pre.transform(drift(split.X_train, names)), drift(split.X_test, names)
    _, centres = two_sites(P, rng)
    device = devices_of(P, centres, rng)
    parts = [P[device == k] for k in range(2 * DEVICES_PER_SITE) if np.any(device == k)]
    Q = mixture_samples(det.mixture_, len(P), np.random.default_rng(seed), det.reg)
    qmap = quantile_map(np.sum([histogram(p) for p in parts], axis=0), Q)
    mapped, weight = [qmap(p) for p in parts], np.array([len(p) for p in parts])
    test_device = devices_of(pre.transform(B_test), centres, rng)
    out = []
    for rounds, scale in SETTINGS:
        alg = FedMMOT(P.shape[1], hidden=HIDDEN, batch=1024, seed=seed, lr=scale * 0.1 / P.shape[1])
        omega = train(alg, mapped, Q, rounds, 1.0, seed, weight=weight)["omega"]
        r = measure(MappedDetector(det, alg.layout, omega, qmap), B_test, split.y_test, test_device) \
            if np.isfinite(omega).all() else None
        cell = "diverged" if r is None else f"{r['fp']:.2f} / {r['recall']:.2f} / {r['fp_spread']:.2f}"
        out.append(f"| {name} | {rounds} | {scale:g} | {cell} |")
        print(out[-1], flush=True)
    return out


def main(names: list[str]) -> None:
    lines = ["# FedMM-OT after the quantile start (FP / recall / per-device FP spread, %)", "",
             "`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_quantile_refine.py`: "
             "rounds 0 is the quantile start with the network's near-identity init.", "",
             "| data | rounds | step x (0.1 / features) | B's test records |", "|---|---|---|---|"]
    for name in names:
        lines += rows(name)
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/otmap-quantile-refine.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:] or ["nsl-kdd", "ton-iot", "synthetic"])
