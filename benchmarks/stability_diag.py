"""Why a default gmm run catches fewer attacks than its dataset's other runs (issue 21 point 3): for each
`fedsentry simulate pca` flag set given, the run's figures, the share of attacks caught at fixed false-positive
rates on the test set (the model's own tail, without the label-free threshold), and the components the missed
attacks fall in (the most responsible one at the fleet's components).

    python benchmarks/stability_diag.py "--dataset nsl-kdd --partition noniid --seed 0" \
        "--dataset nsl-kdd --partition noniid --seed 3"

`--toy` runs the constructed fleet of the note instead (both seedings, fleets 0..5): three heavy groups of
normal records beside two light ones that flank an attack flood, K = 4.

Findings: benchmarks/results/stability.md.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from fedsentry.cli import build_parser
from fedsentry.cli.pca import COMMAND, resolve_detector
from fedsentry.runs.detection import prepare
from fedsentry.runs.mixture import mixture_simulation
from fedsentry.runs.params import default_algorithm
from models.mixture.gmm import precisions
from models.mixture.simulator import simulate_mixture

RATES = (0.005, 0.01, 0.015, 0.02, 0.03)


def diagnose(flags: list[str]) -> dict:
    argv = ["simulate", COMMAND, *flags]
    args = build_parser(argv).parse_args(argv)
    resolve_detector(args)
    data, split, parts = prepare(args)
    r = mixture_simulation(args, args.algorithm or default_algorithm(args.detector), data, split, parts, keep=True)
    det, y = r["model"], np.asarray(split.y_test)
    m = det.mixture_
    s = np.asarray(det.score_samples(split.X_test))
    normal = np.sort(s[y == 0])
    out = {"flags": " ".join(flags), "auc": round(r["auc_roc"], 4), "f1": round(r["f1"], 3),
           "caught": round(r["recall"], 3), "fpr": round(r["false_positive_rate"], 4)}
    for rate in RATES:  # caught at the test normals' (1 - rate) quantile
        out[f"caught@{rate:g}"] = round(float((s[y == 1] > normal[int((1 - rate) * len(normal))]).mean()), 3)
    at = normal[int(0.99 * len(normal))]
    k = det._components[det._density(det.preprocessor_.transform(split.X_test)).argmax(axis=1)]
    logdet = np.log(np.linalg.eigvalsh(np.linalg.inv(precisions(m.prec_chol)))).sum(axis=1)
    missed = (y == 1) & (s <= at)
    ks, counts = np.unique(k[missed], return_counts=True)
    out["missed_at_1pct_by_component"] = [
        {"component": int(ks[j]), "share_of_attacks": round(float(counts[j] / (y == 1).sum()), 3),
         "weight": round(float(m.weights[ks[j]]), 4), "log_det": round(float(logdet[ks[j]]), 1),
         "median_log_det": round(float(np.median(logdet)), 1),
         "normal_test_records": int(((k == ks[j]) & (y == 0)).sum())}
        for j in np.argsort(-counts)[:3]]
    return out


def toy_fleet(seed: int, d: int = 3) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """20 devices (each group split over 4), and test records: normals of three groups and the flood."""
    rng = np.random.default_rng(seed)
    heavy = [rng.normal(c, 1.0, (300, d)) for c in ([0, 0, 30], [0, 3, 30], [3, 0, 30])]
    light = [rng.normal(c, 0.3, (60, d)) for c in ([-4, 10, 0], [4, 10, 0])]
    parts = [p for g in heavy + light for p in np.array_split(g, 4)]
    flood = rng.normal([0, 10, 0], 0.3, (200, d))
    normal = np.vstack([rng.normal(c, s, (40, d)) for c, s in (([0, 0, 30], 1.0), ([-4, 10, 0], 0.3),
                                                               ([4, 10, 0], 0.3))])
    shift = 50  # positive counters, as traffic features are
    return [p + shift for p in parts], np.vstack([normal, flood]) + shift, np.r_[np.zeros(len(normal)),
                                                                                np.ones(len(flood))]


def toy() -> None:
    for seed in range(6):
        parts, X_test, y_test = toy_fleet(seed)
        caught = {seeding: round(simulate_mixture(parts, X_test, y_test, ["f0", "f1", "f2"], rounds=20, fraction=0.5,
                                                  seed=seed, params={"components": 4, "seeding": seeding,
                                                                     "min_support": 0})["recall"], 2)
                  for seeding in ("merge", "split")}
        print(json.dumps({"fleet": seed, "flood caught": caught}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--toy"]:
        toy()
    for spec in sys.argv[1:]:
        if spec != "--toy":
            print(json.dumps(diagnose(spec.split())), flush=True)
