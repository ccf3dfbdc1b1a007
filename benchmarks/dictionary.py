"""Issue 26 point 4: the dict detector (100 non-i.i.d. clients, 10 % a round, 100 rounds, label-free threshold,
default settings) against PCA's and gmm's defaults and a pooled scikit-learn MiniBatchDictionaryLearning +
SparseCoder, on nsl-kdd, ton-iot and synthetic. Writes benchmarks/results/dictionary.json and .md.

    nice -n 10 python benchmarks/dictionary.py

scikit-learn is a reference only (the server extra)."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.cli import build_parser
from fedsentry.cli.pca import resolve_detector
from fedsentry.runs.detection import prepare, simulate
from fedsentry.runs.params import default_algorithm
from models.detection.metrics import detection_report
from models.detection.preprocessing import Moments, Preprocessor, global_standardisation, signed_log1p
from models.dictionary.fedmm import default_atoms

DATASETS = ("nsl-kdd", "ton-iot", "synthetic")
KEYS = ("auc_roc", "average_precision", "recall", "false_positive_rate", "f1", "threshold", "seconds_per_round")


def pooled_sklearn(X_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, names: list[str], atoms: int,
                   lam: float, quantile: float = 0.99, seed: int = 0) -> dict[str, Any]:
    """MiniBatchDictionaryLearning on every training record (signed log1p, pooled z-score), SparseCoder (lasso_cd)
    codes, score 1/2 ||t - D'h||^2 + lam ||h||_1; threshold: the quantile of the training scores (label-free)."""
    from sklearn.decomposition import MiniBatchDictionaryLearning, SparseCoder

    mask = np.ones(X_train.shape[1], bool)
    mean, scale, _ = global_standardisation([Moments.of(signed_log1p(X_train, mask)).summary()])
    pre = Preprocessor(names, mask, mean, scale)
    T, U = pre.transform(X_train), pre.transform(X_test)
    t0 = time.perf_counter()
    dl = MiniBatchDictionaryLearning(n_components=atoms, alpha=lam, random_state=seed, batch_size=256,
                                     max_iter=20).fit(T)
    coder = SparseCoder(dictionary=dl.components_, transform_algorithm="lasso_cd", transform_alpha=lam)

    def score(A: np.ndarray) -> np.ndarray:
        H = coder.transform(A)
        R = A - H @ dl.components_
        return 0.5 * np.einsum("ij,ij->i", R, R) + lam * np.abs(H).sum(axis=1)

    threshold = float(np.quantile(score(T), quantile))
    report = detection_report(y_test, score(U), threshold)
    return {"atoms": atoms, "lam": lam, "threshold": threshold, "fit_seconds": time.perf_counter() - t0, **report}


def main() -> int:
    logging.disable(logging.WARNING)
    out: dict[str, Any] = {"setup": "100 clients, noniid partition (simulate's default), 10 % a round, 100 rounds, "
                                    "label-free threshold, every family at its defaults, seed 0",
                           "command": "nice -n 10 python benchmarks/dictionary.py", "datasets": {}}
    for ds in DATASETS:
        row: dict[str, Any] = {}
        for det in ("dict", "pca", "gmm"):
            args = build_parser().parse_args(["simulate", "pca", "--detector", det, "--dataset", ds])
            resolve_detector(args)
            data, split, parts = prepare(args)
            t0 = time.perf_counter()
            r = simulate(args, args.algorithm or default_algorithm(det), data, split, parts)
            row[det] = {"algorithm": r["algorithm"], **{k: r.get(k) for k in KEYS},
                        "wall_seconds": time.perf_counter() - t0,
                        **({"atoms": r["atoms"], "lam": r["lam"], "objective": r["objective"],
                            "upload_bytes_per_client_round": r["upload_bytes_per_client_round"]}
                           if det == "dict" else {})}
            print(ds, det, {k: row[det][k] for k in ("auc_roc", "recall", "f1")}, flush=True)
        K = default_atoms(len(data.feature_names))
        row["pooled_sklearn"] = [pooled_sklearn(split.X_train, split.X_test, split.y_test, data.feature_names, k, lam)
                                 for k, lam in sorted({(16, 0.05), (16, 0.1), (16, 0.5), (K, 0.1)})]
        for p in row["pooled_sklearn"]:
            print(ds, "pooled", p["atoms"], p["lam"], round(p["auc_roc"], 4), flush=True)
        out["datasets"][ds] = row
    Path("benchmarks/results/dictionary.json").write_text(json.dumps(out, indent=1))
    Path("benchmarks/results/dictionary.md").write_text(markdown(out))
    return 0


def markdown(out: dict[str, Any]) -> str:
    lines = ["# dict against pca, gmm and a pooled scikit-learn dictionary (issue 26, point 4)", "",
             out["setup"] + ".", "", f"    {out['command']}", "",
             "| data | detector | AUC | AP | recall | FP rate | F1 |", "|---|---|---|---|---|---|---|"]
    for ds, row in out["datasets"].items():
        for det in ("dict", "pca", "gmm"):
            r = row[det]
            lines.append(f"| {ds} | {det} ({r['algorithm']}) | {r['auc_roc']:.4f} | {r['average_precision']:.4f} | "
                         f"{r['recall']:.3f} | {r['false_positive_rate']:.4f} | {r['f1']:.3f} |")
        for p in row["pooled_sklearn"]:
            lines.append(f"| {ds} | pooled sklearn K={p['atoms']} alpha={p['lam']} | {p['auc_roc']:.4f} | "
                         f"{p['average_precision']:.4f} | {p['recall']:.3f} | {p['false_positive_rate']:.4f} | "
                         f"{p['f1']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
