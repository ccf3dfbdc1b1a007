"""Private mode's threshold with and without each device's clip (models.detection.tail_clip; issues 22, 23 point 3).

Runs `fedsentry simulate pca --detector gmm --dataset D --seed 0 --private [--clients N --fraction F --rounds R]
[--adversaries 1 --attack threshold]` in this process twice: as shipped (each device clips its shares above to the
`clip_rank`-th device's) and with the clip off (`winsor` None: the plain sum, as before), and prints AUC / caught /
false positives / threshold / upload bytes per device and round for each.

    FEDSENTRY_DATA_DIR=... OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 \
        python benchmarks/private_threshold_clip.py [--runs fleet100 attack] [--datasets synthetic nsl-kdd ton-iot]
        [--detector gmm] [--json benchmarks/results/private-threshold-clip.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import models.detection.private as private
import models.pca.private as pca_private
from fedsentry.cli import main as cli

sys.path.insert(0, str(Path(__file__).parent))
from private_small_fleet import patched

RUNS = {
    "fleet100": ["--clients", "100", "--fraction", "0.1", "--rounds", "60"],
    "attack": ["--clients", "11", "--fraction", "0.2", "--rounds", "60", "--adversaries", "1", "--attack", "threshold"],
    "clean11": ["--clients", "11", "--fraction", "0.2", "--rounds", "60"],
}


def command(dataset: str, run: str, detector: str) -> list[str]:
    return ["simulate", "pca", "--detector", detector, "--dataset", dataset, "--seed", "0", "--private", *RUNS[run]]


def unclipped(tail: Any) -> Any:
    def plain(histograms: Any, weight: Any, q: float, holdout: float, transport: Any, *winsor: Any) -> Any:
        return tail(histograms, weight, q, holdout, transport, None)
    return plain


def simulate(args: list[str], clip: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        if clip:
            cli([*args, "--json", str(out)])
        else:
            plain = unclipped(private.private_tail)
            with patched(private, "private_tail", plain), patched(pca_private, "private_tail", plain):
                cli([*args, "--json", str(out)])
        r = json.loads(out.read_text())
    return {"auc_roc": round(r["auc_roc"], 4), "caught": round(100 * r["recall"], 1),
            "false_positive_rate": round(100 * r["false_positive_rate"], 2), "threshold": round(r["threshold"], 2),
            "upload_bytes_per_device_round": round(r.get("upload_bytes_per_device_round", float("nan")), 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="+", default=["fleet100", "attack"], choices=sorted(RUNS))
    p.add_argument("--datasets", nargs="+", default=["synthetic", "nsl-kdd", "ton-iot"])
    p.add_argument("--detector", default="gmm", choices=["gmm", "pca"])
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    logging.disable(logging.WARNING)
    rows = json.loads(a.json.read_text()) if a.json and a.json.exists() else []
    for run in a.runs:
        for dataset in a.datasets:
            row = {"dataset": dataset, "run": run, "detector": a.detector,
                   "command": "fedsentry " + " ".join(command(dataset, run, a.detector)),
                   "clipped": simulate(command(dataset, run, a.detector), True),
                   "unclipped": simulate(command(dataset, run, a.detector), False)}
            rows = [r for r in rows if (r["dataset"], r["run"], r["detector"]) != (dataset, run, a.detector)] + [row]
            print(json.dumps(row), flush=True)
            if a.json:
                a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
