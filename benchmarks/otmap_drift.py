"""Issue 26 point 5: a transport map on a promoted gmm model, for a fleet whose traffic moved as a whole.

Fleet A trains the gmm detector (pooled fit, the federated one's reference). Fleet B is A's traffic after a
monotone per-feature drift (every *bytes* counter x 1.5, every *duration* x 1000: the true W2 map is its inverse),
its devices on two sites (a 2-means split of the records, five devices a site). Q = samples of the promoted mixture
(a shared seed): no traffic moves. B's test traffic is scored seven ways: by A's detector unmapped; through the
per-feature affine map matching B's means and variances to Q's (`moments`, A's threshold); through the map FedMM-OT
learnt on B's devices from that start (`mapped`, A's threshold); through the per-feature monotone map from the
devices' summed histograms onto Q (`quantile`: models.otmap.quantile), alone and refined by FedMM-OT; through the
same map onto A's fleet's marginals (per-bin counts and sums of A's training records on the grid, what a promoted
model could carry: not wired) instead of samples of its mixture; and by a gmm retrained on B.
Reported: FP rate on
B's normal test records, recall on its attacks, the spread (max - min) of the per-device FP rates, each in %; also
with 5 % attacks in B's training records. And how far a map may miss: the FP rate of A's own normal test records
moved at random by NOISE standardised units per feature, beside each map's root-mean-square miss per feature against
each B record's own undrifted record (B is A's records drifted, row for row).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_drift.py [datasets...]

writes benchmarks/results/otmap-drift.json and .md. Datasets: nsl-kdd, ton-iot (../shared/data), synthetic."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.data.datasets import load_named, train_test_split
from models.mixture.detector import MixtureDetector
from models.otmap.fedmm import FedMMOT
from models.otmap.field import MappedDetector, mixture_samples
from models.otmap.icnn import init, transport
from models.otmap.quantile import GRID, TRIM, Marginals, histogram, quantile_map
from models.otmap.simulator import train

log = logging.getLogger("otmap-drift")
DEVICES_PER_SITE, ROUNDS, HIDDEN = 5, 50, 32
#: how far (standardised units, per feature) A's own normal test records are moved at random to measure how far a map
#: may miss: the detector's tolerance
NOISE = (0.01, 0.03)


def drift(X: np.ndarray, names: list[str]) -> np.ndarray:
    out = X.copy()
    for j, name in enumerate(names):
        if "bytes" in name:
            out[:, j] *= 1.5
        elif "duration" in name:
            out[:, j] *= 1000
    return out


def two_sites(T: np.ndarray, rng: np.random.Generator, iterations: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """2-means on standardised records: each record's site, and the centres (to place test records)."""
    centres = T[rng.choice(len(T), 2, replace=False)]
    for _ in range(iterations):
        site = np.argmin(((T[:, None] - centres[None]) ** 2).sum(axis=2), axis=1)
        centres = np.stack([T[site == s].mean(axis=0) if np.any(site == s) else centres[s] for s in range(2)])
    return site, centres


def devices_of(T: np.ndarray, centres: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    site = np.argmin(((T[:, None] - centres[None]) ** 2).sum(axis=2), axis=1)
    return site * DEVICES_PER_SITE + rng.integers(DEVICES_PER_SITE, size=len(T))


def measure(det: Any, X: np.ndarray, y: np.ndarray, device: np.ndarray) -> dict[str, float]:
    flagged = det.score_samples(X) > det.threshold_
    normal = y == 0
    per_device = [100 * flagged[normal & (device == k)].mean() for k in np.unique(device[normal])]
    return {"fp": float(100 * flagged[normal].mean()), "recall": float(100 * flagged[~normal].mean()),
            "fp_spread": float(np.max(per_device) - np.min(per_device))}


def rms(layout: Any, omega: np.ndarray, P: np.ndarray, truth: np.ndarray) -> float:
    """The map's root-mean-square miss per feature (standardised units) against each record's own undrifted one."""
    return float(np.sqrt(np.mean((transport(layout, omega, P) - truth) ** 2)))


def one(name: str, contamination: float, seed: int = 0) -> dict[str, Any]:
    data = load_named(name, seed=seed)
    a = train_test_split(data, seed=seed)
    b = train_test_split(data, seed=seed, contamination=contamination)
    names = data.feature_names
    det_a = MixtureDetector(seed=seed).fit(a.X_train, names)
    a_test_normal = a.X_test[a.y_test == 0]
    fp_a = float(100 * (det_a.score_samples(a_test_normal) > det_a.threshold_).mean())
    T_a, noise_rng = det_a.preprocessor_.transform(a_test_normal), np.random.default_rng(seed)
    fp_noise = [float(100 * (det_a.score_samples(det_a.preprocessor_.inverse_transform(
        T_a + s * noise_rng.standard_normal(T_a.shape))) > det_a.threshold_).mean()) for s in NOISE]
    rng = np.random.default_rng(seed)
    B_train, B_test = drift(b.X_train, names), drift(b.X_test, names)
    pre = det_a.preprocessor_
    P = pre.transform(B_train)
    _, centres = two_sites(P, rng)
    device = devices_of(P, centres, rng)
    parts = [P[device == k] for k in range(2 * DEVICES_PER_SITE) if np.any(device == k)]
    Q = mixture_samples(det_a.mixture_, len(P), np.random.default_rng(seed), det_a.reg)
    t0 = time.perf_counter()
    alg = FedMMOT(P.shape[1], hidden=HIDDEN, batch=1024, seed=seed)
    weight = np.array([len(p) for p in parts])
    start = train(alg, parts, Q, 0, 1.0, seed, weight=weight, moments=True)["omega"]
    omega = train(alg, parts, Q, ROUNDS, 1.0, seed, weight=weight, moments=True)["omega"]
    seconds = time.perf_counter() - t0
    moments, mapped = MappedDetector(det_a, alg.layout, start), MappedDetector(det_a, alg.layout, omega)
    qmap = quantile_map(np.sum([histogram(p) for p in parts], axis=0), Q)
    identity = init(alg.layout, rng, scale=0.0)
    refined = train(alg, [qmap(p) for p in parts], Q, ROUNDS, 1.0, seed, weight=weight)["omega"]
    quantile = MappedDetector(det_a, alg.layout, identity, qmap)
    # onto A's fleet's own marginals (per-bin counts and sums of its training records: sums only, what a promoted
    # model could carry) instead of samples of its mixture
    onto_a = MappedDetector(det_a, alg.layout, identity, quantile_map(np.sum([histogram(p) for p in parts], axis=0),
                                                                       Marginals.of(pre.transform(a.X_train))))
    diverged = not np.isfinite(refined).all()  # measured on nsl-kdd: reported, not hidden
    quantile_fedmm = None if diverged else MappedDetector(det_a, alg.layout, refined, qmap)
    retrained = MixtureDetector(seed=seed).fit(B_train, names)
    test_device = devices_of(pre.transform(B_test), centres, rng)
    fp_q = float(100 * (det_a.score_samples(pre.inverse_transform(Q)) > det_a.threshold_).mean())
    out = {"dataset": name, "contamination": contamination, "fp_A": fp_a, "fp_Q": fp_q, "map_seconds": seconds,
           "features": P.shape[1], "devices": len(parts), "train_records": len(P), "fp_A_noise": fp_noise,
           "rms_moments": rms(alg.layout, start, P, pre.transform(b.X_train)),
           "rms_mapped": rms(alg.layout, omega, P, pre.transform(b.X_train)),
           "rms_quantile": rms(alg.layout, identity, qmap(P), pre.transform(b.X_train)),
           "rms_quantile_fedmm": None if diverged else rms(alg.layout, refined, qmap(P), pre.transform(b.X_train)),
           "trim": TRIM, "histogram_bytes": 8 * P.shape[1] * (len(GRID) - 1)}
    for label, det in (("unmapped", det_a), ("moments", moments), ("mapped", mapped), ("quantile", quantile),
                       ("quantile_fedmm", quantile_fedmm), ("quantile_onto_A", onto_a), ("retrained", retrained)):
        out[label] = None if det is None else measure(det, B_test, b.y_test, test_device)
    for label in ("mapped", "quantile", "quantile_fedmm", "quantile_onto_A"):
        if out[label] is None:
            out[f"{label}_fp_within_1_of_A"] = out[f"{label}_recall_within_3_of_retrained"] = False
            continue
        out[f"{label}_fp_within_1_of_A"] = abs(out[label]["fp"] - fp_a) <= 1
        out[f"{label}_recall_within_3_of_retrained"] = out[label]["recall"] >= out["retrained"]["recall"] - 3
    log.info("%s", out)
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["# Issue 26 point 5: a transport map on a promoted gmm (FP, recall, per-device FP spread: %)", "",
             "`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_drift.py`: B = A with bytes "
             f"x 1.5 and durations x 1000 on two sites of {DEVICES_PER_SITE} devices; map: fedmm-ot, {ROUNDS} rounds, "
             f"all devices, {HIDDEN} hidden units, Q = samples of A's mixture (its ridge taken off). A moved: FP of "
             f"A's normal test records each moved by N(0, s^2) per standardised feature, s = "
             f"{' / '.join(map(str, NOISE))} (how far a map may miss); miss: the map's root-mean-square miss per "
             "feature, standardised, against each B record's own undrifted record.", "",
             "quantile: the per-feature monotone map from the devices' summed histograms onto Q "
             "(models.otmap.quantile), alone; quantile + fedmm-ot: FedMM-OT refining after it (from its near-identity "
             "start); quantile onto A: the same map onto A's fleet's marginals (per-bin counts and sums of its "
             "training records on the grid; not wired: a promoted model does not carry them) instead of Q. "
             "Verdicts: FP within 1 point of A's / recall within 3 of retrained, "
             "for mapped, quantile, quantile + fedmm-ot, quantile onto A.", "",
             "| data | attacks in B's training | A: FP | A moved | Q flagged | unmapped FP / recall / spread | moments "
             "| mapped | quantile | quantile + fedmm-ot | quantile onto A | retrained "
             "| miss: moments / mapped / quantile / q + fedmm-ot "
             "| verdicts | map s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[k]['fp']:.2f} / {r[k]['recall']:.2f} / {r[k]['fp_spread']:.2f}" if r[k] else "diverged"
                 for k in ("unmapped", "moments", "mapped", "quantile", "quantile_fedmm", "quantile_onto_A",
                           "retrained")]
        moved = " / ".join(f"{v:.2f}" for v in r["fp_A_noise"])
        miss = " / ".join("-" if r["rms_" + k] is None else f"{r['rms_' + k]:.3f}"
                          for k in ("moments", "mapped", "quantile", "quantile_fedmm"))
        verdicts = ", ".join("/".join("yes" if r[f"{k}_{v}"] else "no" for v in
                                      ("fp_within_1_of_A", "recall_within_3_of_retrained"))
                             for k in ("mapped", "quantile", "quantile_fedmm", "quantile_onto_A"))
        lines.append(f"| {r['dataset']} | {100 * r['contamination']:.0f} % | {r['fp_A']:.2f} | {moved} | "
                     f"{r['fp_Q']:.2f} | {' | '.join(cells)} | {miss} | {verdicts} | {r['map_seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(names: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rows = [one(name, c) for name in names for c in (0.0, 0.05)]
    out = Path("benchmarks/results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "otmap-drift.json").write_text(json.dumps(rows, indent=1))
    (out / "otmap-drift.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main(sys.argv[1:] or ["nsl-kdd", "ton-iot", "synthetic"])
