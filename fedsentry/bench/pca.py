"""`fedsentry bench pca`: every algorithm on one split, plus IsolationForest, scoring speed and memory.

Writes a markdown table and a convergence plot (subspace distance to centralised PCA per round) to
--out, named after the dataset, and returns everything as one dict (for --json).

It is about two families by name, not a dispatch over the registry: it compares the PCA algorithms with each other
and with the Gaussian mixture (the README's tables), so it names both detectors.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.data import datasets
from models.detection.metrics import detection_report
from models.detection.preprocessing import signed_log1p
from models.mixture.spec import MixtureJobSpec
from models.partition import partition
from models.pca.detector import PCADetector
from models.pca.simulator import federated_threshold, prepare_clients
from models.pca.spec import PCAJobSpec

log = logging.getLogger("fedsentry.bench")

_GMM_QUANTILE = MixtureJobSpec.quantile

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


#: kernel PCA rows (random Fourier features, models.kernel) when the command's rows are linear:
#: (label, algorithm, extra algorithm parameters); rank KERNEL_RANK of the lifted features
KERNEL_VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("kernel PCA (rff), fedmm 8-bit", "fedmm", {"bits": 8}),
    ("kernel PCA (rff), centralized", "centralized", {}),
]
KERNEL_RANK = 100

#: the Gaussian-mixture rows: (label, algorithm, extra algorithm parameters)
MIXTURE_VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("gmm fedem", "fedem", {}),
    ("gmm centralized (pooled EM)", "centralized", {}),
]


def bench(args: argparse.Namespace, data: datasets.TrafficData, split: datasets.Split, parts: list[np.ndarray]):
    from fedsentry.runs.detection import simulate
    from fedsentry.runs.mixture import mixture_simulation

    command = shlex.join(["fedsentry", *sys.argv[1:]])
    rows: list[dict[str, Any]] = []
    pca = argparse.Namespace(**{**vars(args), "detector": "pca", "quantile": args.quantile or PCAJobSpec.quantile})
    for label, algorithm, overrides, extra in VARIANTS:
        result = simulate(pca, algorithm, data, split, parts, params=extra, strict=False, **overrides)
        rows.append({**result, "label": label, "detector": "pca"})
        _log(rows[-1])
    if args.kernel == "none":
        rff = argparse.Namespace(**{**vars(pca), "kernel": "rff", "rank": KERNEL_RANK})
        for label, algorithm, extra in KERNEL_VARIANTS:
            result = simulate(rff, algorithm, data, split, parts, params=extra, strict=False)
            rows.append({**result, "label": f"{label} (D={rff.kernel_features}, rank {KERNEL_RANK})",
                         "detector": "pca"})
            _log(rows[-1])
    gmm = argparse.Namespace(**{**vars(args), "detector": "gmm", "trim": 0.0})
    mixture = None
    for label, algorithm, extra in MIXTURE_VARIANTS:
        result = mixture_simulation(gmm, algorithm, data, split, parts, params=extra, strict=False, keep=True)
        det = result.pop("model")
        mixture = det if algorithm == "fedem" else mixture
        rows.append({**result, "label": f"{label} (K={result['components']}, reg={result['reg']:g})"})
        _log(rows[-1])
    rows.append(isolation_forest(args, split))
    rows.append(nearest_neighbour(args, split, parts))
    calibration = calibration_study(gmm, data, split)
    robust = contamination_study(pca, data)
    speed = {"pca": scoring_speed(_centralized_detector(parts, data, pca), split.X_test, quick=args.quick),
             "gmm": scoring_speed(mixture, split.X_test, quick=args.quick)}
    out = {"dataset": data.name, "command": command, "settings": _settings(args, data, split),
           "results": rows, "contamination": robust, "scoring": speed, "calibration": calibration}
    write_report(out, Path(args.out))
    return out


def _log(r: dict[str, Any]) -> None:
    log.info("%-45s auc=%.4f ap=%.4f f1=%.3f recall=%.3f fpr=%.4f s/round=%.5f", r["label"], r["auc_roc"],
             r["average_precision"], r["f1"], r["recall"], r["false_positive_rate"], r["seconds_per_round"])


def _settings(args, data, split) -> dict[str, Any]:
    return {"clients": args.clients, "fraction": args.fraction, "rounds": args.rounds, "rank": args.rank,
            "local_steps": args.local_steps, "partition": args.partition, "seed": args.seed,
            "quantile": args.quantile or PCAJobSpec.quantile, "holdout": args.holdout, "kernel": args.kernel,
            "kernel_features": args.kernel_features, "kernel_gamma": args.kernel_gamma,
            "n_features": len(data.feature_names), "n_train": len(split.X_train), "n_test": len(split.X_test),
            "attack_share_test": float(split.y_test.mean())}


def isolation_forest(args, split) -> dict[str, Any]:
    """scikit-learn's IsolationForest on the pooled training records: a non-PCA, non-federated reference."""
    from sklearn.ensemble import IsolationForest

    t0 = time.perf_counter()
    model = IsolationForest(random_state=args.seed, n_jobs=1).fit(split.X_train)
    fit = time.perf_counter() - t0
    thr = float(np.quantile(-model.score_samples(split.X_train), args.quantile or PCAJobSpec.quantile))
    rep = detection_report(split.y_test, -model.score_samples(split.X_test), thr)
    return {"label": "IsolationForest (pooled data)", "algorithm": "isolation-forest", "rounds": 1,
            "seconds_per_round": fit, "upload_bytes_per_client_round": None, "subspace_distance": None,
            "threshold": thr, "history": [], **rep}


def nearest_neighbour(args, split, parts: list[np.ndarray]) -> dict[str, Any]:
    """Distance to the nearest training record (signed log1p, z-score), every device's records pooled: the
    raw-data ceiling no federated model can match without sending traffic. The threshold is the quantile of
    the held-out records' distances (the same held-out share as the mixture's)."""
    from sklearn.neighbors import NearestNeighbors

    from models.mixture.simulator import split_holdout

    fit, held = (np.vstack(p) for p in split_holdout(parts, args.holdout))
    mask = np.ones(fit.shape[1], bool)
    T = signed_log1p(fit, mask)
    mean, scale = T.mean(axis=0), np.where(T.std(axis=0) > 0, T.std(axis=0), 1.0)
    t0 = time.perf_counter()
    nn = NearestNeighbors(n_neighbors=1).fit((T - mean) / scale)

    def distance(X: np.ndarray) -> np.ndarray:
        return nn.kneighbors((signed_log1p(X, mask) - mean) / scale)[0][:, 0]

    thr = float(np.quantile(distance(held), args.quantile or _GMM_QUANTILE))
    rep = detection_report(split.y_test, distance(split.X_test), thr)
    return {"label": "nearest-neighbour distance (pooled data)", "algorithm": "1-nn", "rounds": 1,
            "seconds_per_round": time.perf_counter() - t0, "upload_bytes_per_client_round": None,
            "subspace_distance": None, "threshold": thr, "history": [], **rep}


def calibration_study(args, data, split, devices: int = 20, holdout: float = 0.4) -> dict[str, Any]:
    """Per-device false-positive rates of the federated mixture on normal records none of them trained on:
    under the one global threshold, and with each device's own calibration
    (`models.detection.threshold.device_threshold`,
    `fedsentry agent --calibrate`) taken on half of its held-out records and checked on the other half.
    Fewer, larger devices than the main rows, so that each holds enough records to calibrate."""
    from models.detection.threshold import device_threshold
    from models.mixture.simulator import simulate_mixture, split_holdout

    idx = partition(split.X_train, devices, args.partition, np.random.default_rng(args.seed))
    parts = [split.X_train[i] for i in idx]
    det = simulate_mixture(parts, split.X_test, split.y_test, data.feature_names, seed=args.seed,
                           holdout=holdout, quantile=args.quantile or _GMM_QUANTILE)["detector"]
    rates: dict[str, list[float]] = {"global": [], "calibrated": []}
    for held in split_holdout(parts, holdout)[1]:
        s = np.asarray(det.score_samples(held))
        calib, check = s[::2], s[1::2]
        rates["global"].append(float(np.mean(check > det.threshold_)))
        rates["calibrated"].append(float(np.mean(check > device_threshold(det.threshold_, calib, det.quantile))))
    return {"devices": devices, "holdout": holdout,
            **{k: {"min": min(v), "max": max(v), "std": float(np.std(v)), "per_device": v} for k, v in rates.items()}}


def contamination_study(args, data, share: float = 0.05) -> list[dict[str, Any]]:
    """Training normals with a share of attacks mixed in: fedmm without and with --trim."""
    from fedsentry.runs.detection import simulate

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


def scoring_speed(det: Any, X_test: np.ndarray, quick: bool = False) -> dict[str, Any]:
    """What an agent's scoring costs, measured in a fresh process limited to one core (one BLAS thread):
    batched throughput (preprocessing and explanations of flagged records included), single-record latency
    and peak resident memory."""
    n = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        model, records = Path(tmp) / "model.json", Path(tmp) / "records.npy"
        model.write_text(json.dumps(det.to_dict()))
        np.save(records, X_test[:20_000])
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", _PROBE, str(model), str(records), str(n), str(int(quick))],
                             capture_output=True, text=True, check=True, env=env)
    return {"detector": type(det).__name__, **json.loads(out.stdout)}


# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec.
_PROBE = """
import json, sys, time
import numpy as np
from wire.model import detector_from_dict
det = detector_from_dict(json.load(open(sys.argv[1])))
X_test, n, quick = np.load(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
chunk = 10_000  # an agent scores what it read since the last poll: batches, not the whole log at once
X = np.tile(X_test, (chunk // len(X_test) + 1, 1))[:chunk]
times, flagged = [], 0
for _ in range(1 if quick else 3):
    t0 = time.perf_counter()
    for _ in range(n // chunk):
        s = det.score_samples(X)
        hit = np.flatnonzero(s > det.threshold_)
        det.explain(X[hit[:1000]])  # an agent explains what it flags (alerts are rate-limited per device)
        flagged += len(hit)
    times.append(time.perf_counter() - t0)
lat = []
for i in range(2_000 if quick else 20_000):
    x = X_test[i % len(X_test)]
    t0 = time.perf_counter()
    det.score_samples(x)
    lat.append(time.perf_counter() - t0)
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
print(json.dumps({"batch_records": n, "records_per_second": n / float(np.median(times)),
                  "flagged_share": flagged / (n * len(times)),
                  "single_record_median_us": float(np.median(lat) * 1e6),
                  "single_record_p99_us": float(np.quantile(lat, 0.99) * 1e6),
                  "scoring_process_peak_rss_mb": int(hwm.split()[1]) / 1024}))
"""


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
        f"# Federated anomaly detection benchmark: {out['dataset']}",
        "",
        f"Command: `{out['command']}`",
        "",
        f"{s['n_train']} training records (normal only) on {s['clients']} clients ({s['partition']}), "
        f"{s['n_test']} test records ({100 * s['attack_share_test']:.1f} % attacks), {s['n_features']} features, "
        f"rank {s['rank']}, {s['local_steps'] or 10} local steps (fedpe, fedpg), seed {s['seed']}. "
        f"Subspace distance (SD) is to "
        f"centralised PCA of the same training data (0 = identical, {np.sqrt(s['rank']):.2f} = orthogonal). "
        f"F1, recall (attacks caught) and false-positive rate are at the label-free threshold: PCA, the devices' "
        f"{s['quantile']} quantiles of their training errors (a trimmed mean on a log scale); gmm, the "
        f"quantile of the mixture's default ({_GMM_QUANTILE}) of the scores of the {s['holdout']:.0%} of each "
        f"device's records held out of training (a winsorised mean of the devices' exceedance curves); "
        f"nearest-neighbour distance, the same quantile of the held-out records' distances. Upload is the "
        f"payload a sampled device sends per round.",
        "",
        "| detector, algorithm | rounds | fraction | SD | AUC-ROC | avg. precision | F1 | recall | FP rate | s/round "
        "| upload B/client/round |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in out["results"]:
        lines.append(
            f"| {r['label']} | {r['rounds']} | {r.get('fraction', '–')} | {_fmt(r['subspace_distance'], '.4f')} | "
            f"{r['auc_roc']:.4f} | {r['average_precision']:.4f} | {r['f1']:.3f} | {r['recall']:.3f} | "
            f"{r['false_positive_rate']:.4f} | {r['seconds_per_round']:.5f} | "
            f"{_fmt(r['upload_bytes_per_client_round'], 'd')} |")
    lines += ["", "Training on traffic that is not clean (attack rows mixed into the training normals), fedmm:", "",
              "| contamination | trim | trim by | AUC-ROC | avg. precision | F1 | SD |",
              "|---:|---:|---|---:|---:|---:|---:|"]
    for r in out["contamination"]:
        lines.append(f"| {r['contamination']} | {r['trim']} | {r['trim_by']} | {r['auc_roc']:.4f} | "
                     f"{r['average_precision']:.4f} | {r['f1']:.3f} | {r['subspace_distance']:.4f} |")
    c = out["calibration"]
    lines += ["", f"Per-device calibration (gmm, {c['devices']} non-i.i.d. devices, false-positive rate on half of "
              f"each device's held-out normal records, calibrated on the other half; `fedsentry agent --calibrate`): "
              f"global threshold {100 * c['global']['min']:.1f}-{100 * c['global']['max']:.1f} % per device "
              f"(std {100 * c['global']['std']:.2f} points), calibrated {100 * c['calibrated']['min']:.1f}-"
              f"{100 * c['calibrated']['max']:.1f} % (std {100 * c['calibrated']['std']:.2f}); a device with fewer "
              "than 200 held-out scores keeps the federation's threshold."]
    lines += ["", "Scoring on an agent (a fresh process, one core, batches of 10,000 records, preprocessing "
              "included, explanations for flagged records):", "",
              "| detector | records/s | one record: median µs | p99 µs | peak RSS MB |", "|---|---:|---:|---:|---:|"]
    for name, sp in out["scoring"].items():
        lines.append(f"| {name} ({sp['detector']}) | {sp['records_per_second']:,.0f} | "
                     f"{sp['single_record_median_us']:.1f} | {sp['single_record_p99_us']:.1f} | "
                     f"{sp['scoring_process_peak_rss_mb']:.1f} |")
    lines += ["", f"![convergence]({png})", ""]
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
