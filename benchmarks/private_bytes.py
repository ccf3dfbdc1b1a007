"""Private mode's upload against plaintext's (issue 23 point 5: at most 2x per device and round), per dataset,
detector and seed, with where the private bytes go (`upload_bytes_by_step`: keys, encrypted shares, masked
upload, revealed shares).

    nice -n 10 python benchmarks/private_bytes.py --out DIR [--seeds 0 1] [--detectors gmm pca]
        [--json benchmarks/results/private-bytes.json]

runs `fedsentry simulate pca --detector D --dataset X --clients 100 --seed S [--private] --json DIR/...` for each
(a run whose JSON is already in DIR is not run again) and writes every run's command and figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

DATASETS = ("synthetic", "nsl-kdd", "ton-iot")


def command(detector: str, dataset: str, seed: int, private: bool, out: Path, extra: Sequence[str] = ()) -> list[str]:
    return ["fedsentry", "simulate", "pca", "--detector", detector, "--dataset", dataset, "--clients", "100",
            "--seed", str(seed), *extra, *(["--private"] if private else []), "--json", str(out)]


def run(detector: str, dataset: str, seed: int, private: bool, folder: Path) -> dict:
    out = folder / f"{dataset}-{detector}-s{seed}{'-private' if private else ''}.json"
    cmd = command(detector, dataset, seed, private, out)
    if not out.exists():
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    r = json.loads(out.read_text())
    return {"command": " ".join([*cmd[:-1], "F"]), "auc_roc": r["auc_roc"],
            "upload_bytes_per_device_round": r["upload_bytes_per_device_round"],
            "upload_bytes_by_step": r.get("upload_bytes_by_step")}


def runs_parser(doc: str | None, seeds: list[int]) -> argparse.ArgumentParser:
    """The options every plaintext-against-private benchmark takes: where the runs' JSON go, seeds, datasets."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the runs' JSON")
    p.add_argument("--seeds", type=int, nargs="+", default=seeds)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    return p


def main(argv: list[str]) -> int:
    p = runs_parser(__doc__, [0])
    p.add_argument("--detectors", nargs="+", default=["gmm", "pca"], choices=["gmm", "pca"])
    p.add_argument("--json", type=Path, help="where to write the table (default: print it)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for detector in args.detectors:
        for dataset in args.datasets:
            for seed in args.seeds:
                plain = run(detector, dataset, seed, False, args.out)
                private = run(detector, dataset, seed, True, args.out)
                ratio = private["upload_bytes_per_device_round"] / plain["upload_bytes_per_device_round"]
                rows.append({"detector": detector, "dataset": dataset, "seed": seed, "plaintext": plain,
                             "private": private, "ratio": ratio, "target_2x_met": ratio <= 2.0})
                print(f"{detector} {dataset} seed {seed}: {plain['upload_bytes_per_device_round']:,.0f} -> "
                      f"{private['upload_bytes_per_device_round']:,.0f} bytes ({ratio:.2f}x), AUC "
                      f"{plain['auc_roc']:.4f} -> {private['auc_roc']:.4f}")
    text = json.dumps({"what": "private mode's upload per device and round against plaintext (issue 23 point 5)",
                       "runs": rows}, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
