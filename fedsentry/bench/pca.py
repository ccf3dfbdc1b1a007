"""`fedsentry bench pca`: every algorithm on one split, plus IsolationForest, scoring speed and memory.

Writes a markdown table and a convergence plot (subspace distance to centralised PCA per round) to
--out, named after the dataset, and returns everything as one dict (for --json).
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.data import datasets
from models.detector import PCADetector
from models.metrics import detection_report
from models.partition import partition
from models.simulator import federated_threshold, prepare_clients

log = logging.getLogger("fedsentry.bench")

#: (label, algorithm, overrides of the command's settings, extra algorithm parameters)
VARIANTS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("centralized", "centralized", {}, {}),
    ("local", "local", {}, {}),
    ("fedpe", "fedpe", {}, {}),
    ("fedpg", "fedpg", {}, {}),
    ("fedpg, 30 local steps", "fedpg", {}, {"local_steps": 30}),
    ("fedmm, plain table (DESIGN.md prototype)", "fedmm", {}, {"transport": False}),
    ("fedmm", "fedmm", {}, {}),
    ("fedmm, 8-bit uploads", "fedmm", {}, {"bits": 8}),
    ("fedmm, 30 % participation, 50 rounds", "fedmm", {"fraction": 0.3, "rounds": 50}, {}),
]


def bench(args: argparse.Namespace, data: datasets.TrafficData, split: datasets.Split, parts: list[np.ndarray]):
    from fedsentry.runs.pca import simulate

    command = shlex.join(["fedsentry", *sys.argv[1:]])
    rows: list[dict[str, Any]] = []
    for label, algorithm, overrides, extra in VARIANTS:
        result = simulate(args, algorithm, data, split, parts, params=extra, strict=False, **overrides)
        result["label"] = label
        rows.append(result)
        log.info("%-45s auc=%.4f ap=%.4f sd=%.4f s/round=%.5f", label, result["auc_roc"],
                 result["average_precision"], result["subspace_distance"], result["seconds_per_round"])
    rows.append(isolation_forest(args, split))
    robust = contamination_study(args, data)
    final_Z = _centralized_detector(parts, data, args)
    speed = scoring_speed(final_Z, split.X_test, quick=args.quick)
    out = {"dataset": data.name, "command": command, "settings": _settings(args, data, split),
           "results": rows, "contamination": robust, "scoring": speed}
    write_report(out, Path(args.out))
    return out


def _settings(args, data, split) -> dict[str, Any]:
    return {"clients": args.clients, "fraction": args.fraction, "rounds": args.rounds, "rank": args.rank,
            "local_steps": args.local_steps, "partition": args.partition, "seed": args.seed,
            "quantile": args.quantile, "kernel": args.kernel, "kernel_features": args.kernel_features,
            "kernel_gamma": args.kernel_gamma, "n_features": len(data.feature_names), "n_train": len(split.X_train),
            "n_test": len(split.X_test), "attack_share_test": float(split.y_test.mean())}


def isolation_forest(args, split) -> dict[str, Any]:
    """scikit-learn's IsolationForest on the pooled training records: a non-PCA, non-federated reference."""
    from sklearn.ensemble import IsolationForest

    t0 = time.perf_counter()
    model = IsolationForest(random_state=args.seed, n_jobs=1).fit(split.X_train)
    fit = time.perf_counter() - t0
    thr = float(np.quantile(-model.score_samples(split.X_train), args.quantile))
    rep = detection_report(split.y_test, -model.score_samples(split.X_test), thr)
    return {"label": "IsolationForest (pooled data)", "algorithm": "isolation-forest", "rounds": 1,
            "seconds_per_round": fit, "upload_bytes_per_client_round": None, "subspace_distance": None,
            "threshold": thr, "history": [], **rep}


def contamination_study(args, data, share: float = 0.05) -> list[dict[str, Any]]:
    """Training normals with a share of attacks mixed in: fedmm without and with --trim."""
    from fedsentry.runs.pca import simulate

    split = datasets.train_test_split(data, seed=args.seed, contamination=share)
    idx = partition(split.X_train, args.clients, args.partition, np.random.default_rng(args.seed))
    parts = [split.X_train[i] for i in idx]
    rows = []
    for trim, by in ((0.0, "distance"), (share, "residual"), (share, "distance"), (2 * share, "distance")):
        r = simulate(args, "fedmm", data, split, parts, trim=trim, trim_by=by)
        rows.append({"contamination": share, "trim": trim, "trim_by": by if trim else "–", **{k: r[k] for k in (
            "auc_roc", "average_precision", "f1", "subspace_distance")}})
    return rows


def _centralized_detector(parts, data, args) -> PCADetector:
    from fedsentry.runs.pca import kernel_settings
    from models.kernel import RandomFourierFeatures
    from models.pca.baselines import centralized_pca

    k = kernel_settings(args)
    lift = None
    if k["kernel"] == "rff":
        lift = RandomFourierFeatures(len(data.feature_names), k["kernel_features"], k["kernel_gamma"], args.seed)
    clients = prepare_clients(parts, data.feature_names, lift=lift)
    Z = centralized_pca(clients.C, clients.weight, args.rank)
    return PCADetector.from_model(Z, clients.preprocessor, federated_threshold(clients, Z, args.quantile), lift)


def scoring_speed(det: PCADetector, X_test: np.ndarray, quick: bool = False) -> dict[str, Any]:
    """Batched throughput (preprocessing and explanations of flagged records included), single-record
    latency, and the peak resident memory of a process that only scores."""
    n = 100_000 if quick else 1_000_000
    X = np.tile(X_test, (n // len(X_test) + 1, 1))[:n]
    times = []
    for _ in range(1 if quick else 3):
        t0 = time.perf_counter()
        s = det.score_samples(X)
        flagged = np.flatnonzero(s > det.threshold_)
        det.explain(X[flagged[:10_000]])  # an agent explains what it flags; capped per batch
        times.append(time.perf_counter() - t0)
    lat = []
    x = X_test[0]
    for i in range(2_000 if quick else 20_000):
        x = X_test[i % len(X_test)]
        t0 = time.perf_counter()
        det.score_samples(x)
        lat.append(time.perf_counter() - t0)
    return {"batch_records": n, "records_per_second": n / float(np.median(times)),
            "flagged_share": float(len(flagged) / n),
            "single_record_median_us": float(np.median(lat) * 1e6),
            "single_record_p99_us": float(np.quantile(lat, 0.99) * 1e6),
            "scoring_process_peak_rss_mb": scoring_process_memory(det)}


# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec.
_PROBE = """
import json, sys
import numpy as np
from models.detector import PCADetector
det = PCADetector.from_dict(json.load(open(sys.argv[1])))
rng = np.random.default_rng(0)
for _ in range(200):
    X = np.abs(rng.standard_normal((1000, len(det.feature_names_)))) * 100
    s = det.score_samples(X)
    det.explain(X[s > det.threshold_][:50])
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
print(int(hwm.split()[1]) / 1024)
"""


def scoring_process_memory(det: PCADetector) -> float:
    """Peak RSS (MB) of a fresh Python process that loads the model and scores 200,000 records."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(det.to_dict(), f)
    out = subprocess.run([sys.executable, "-c", _PROBE, f.name], capture_output=True, text=True, check=True)
    Path(f.name).unlink()
    return float(out.stdout.strip())


def write_report(out: dict[str, Any], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"pca-{out['dataset']}"
    (folder / f"{stem}.md").write_text(markdown(out, f"{stem}.png"))
    plot(out, folder / f"{stem}.png")
    log.info("wrote %s and %s", folder / f"{stem}.md", folder / f"{stem}.png")


def _fmt(v: Any, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def markdown(out: dict[str, Any], png: str) -> str:
    s = out["settings"]
    lines = [
        f"# Federated PCA benchmark: {out['dataset']}",
        "",
        f"Command: `{out['command']}`",
        "",
        f"{s['n_train']} training records (normal only) on {s['clients']} clients ({s['partition']}), "
        f"{s['n_test']} test records ({100 * s['attack_share_test']:.1f} % attacks), {s['n_features']} features, "
        f"rank {s['rank']}, {s['local_steps'] or 10} local steps (fedpe, fedpg), seed {s['seed']}. "
        f"Subspace distance (SD) is to "
        f"centralised PCA of the same training data (0 = identical, {np.sqrt(s['rank']):.2f} = orthogonal). "
        f"F1 is at the label-free threshold (the devices' {s['quantile']} quantiles of their training errors, "
        f"a trimmed mean on a log scale).",
        "",
        "| algorithm | rounds | fraction | SD | AUC-ROC | avg. precision | F1 | s/round | upload B/client/round |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in out["results"]:
        lines.append(
            f"| {r['label']} | {r['rounds']} | {r.get('fraction', '–')} | {_fmt(r['subspace_distance'], '.4f')} | "
            f"{r['auc_roc']:.4f} | {r['average_precision']:.4f} | {r['f1']:.3f} | {r['seconds_per_round']:.5f} | "
            f"{_fmt(r['upload_bytes_per_client_round'], 'd')} |")
    lines += ["", "Training on traffic that is not clean (attack rows mixed into the training normals), fedmm:", "",
              "| contamination | trim | trim by | AUC-ROC | avg. precision | F1 | SD |",
              "|---:|---:|---|---:|---:|---:|---:|"]
    for r in out["contamination"]:
        lines.append(f"| {r['contamination']} | {r['trim']} | {r['trim_by']} | {r['auc_roc']:.4f} | "
                     f"{r['average_precision']:.4f} | {r['f1']:.3f} | {r['subspace_distance']:.4f} |")
    sp = out["scoring"]
    lines += ["", "Scoring (one core, preprocessing included, explanations for flagged records):", "",
              f"- batched: {sp['records_per_second']:,.0f} records/s over {sp['batch_records']:,} records",
              f"- one record: median {sp['single_record_median_us']:.1f} µs, p99 {sp['single_record_p99_us']:.1f} µs",
              f"- peak resident memory of a process that only scores: {sp['scoring_process_peak_rss_mb']:.1f} MB",
              "", f"![convergence]({png})", ""]
    return "\n".join(lines)


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for r in out["results"]:
        h = [e for e in r["history"] if "subspace_distance" in e]
        if len(h) > 1:
            ax.plot([e["round"] for e in h], [max(e["subspace_distance"], 1e-6) for e in h], label=r["label"])
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("subspace distance to centralised PCA")
    ax.set_title(f"Federated PCA on {out['dataset']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
