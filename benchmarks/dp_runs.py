"""The runs behind the README's differential-privacy table (issue 23, point 4): `fedsentry simulate pca` per data
set, detector, seed and mode, each result's figures with its command, written to benchmarks/results/dp.json.

    nice -n 10 python benchmarks/dp_runs.py [--seeds 0 1] [--distributed]

Modes: plaintext (no flags), private (secure sums, no noise), and central differential privacy at epsilon 100 (the
clipping and weight-1 devices, little noise), 8, 4 and 1 (delta 1e-5); with --distributed, the same epsilons in
private mode (each device adds its share of the noise), seed 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).parent / "results" / "dp.json"
KEEP = ("auc_roc", "average_precision", "recall", "false_positive_rate", "f1", "shared_components",
        "all_device_rounds", "subspace_distance", "dp", "private", "dataset", "seed", "clients", "fraction", "rounds")


def run(flags: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = ["fedsentry", "simulate", "pca", *flags, "--json", f.name]
        subprocess.run(cmd, check=True, capture_output=True)
        result = json.loads(Path(f.name).read_text())
    return {"command": " ".join([*cmd[:-1], "F"]), **{k: result.get(k) for k in KEEP}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--distributed", action="store_true")
    p.add_argument("--table", action="store_true", help="print the README's table from the results, run nothing")
    p.add_argument("--extra", default="", help="more flags for every run, in one string (e.g. '--components 8')")
    p.add_argument("--detectors", nargs="+", default=["pca", "gmm"])
    p.add_argument("--modes", nargs="+", help="only these modes (e.g. 'central eps=8')")
    args = p.parse_args()
    if args.table:
        print(table(json.loads(OUT.read_text())["runs"]))
        return
    done = json.loads(OUT.read_text())["runs"] if OUT.exists() else []
    have = {r["command"] for r in done}
    modes = [("plaintext", []), ("private", ["--private"])] + [(f"central eps={e}", ["--dp-epsilon", e])
                                                              for e in ("100", "8", "4", "1")]
    if args.distributed:
        modes = [(f"distributed eps={e}", ["--private", "--dp-epsilon", e]) for e in ("8", "4", "1")]
    for seed in args.seeds:
        for dataset in ("synthetic", "nsl-kdd"):
            for detector in args.detectors:
                for mode, flags in modes:
                    if args.modes and mode not in args.modes:
                        continue
                    cmd = ["--dataset", dataset, "--detector", detector, "--seed", str(seed), *flags,
                           *args.extra.split()]
                    if "fedsentry simulate pca " + " ".join(cmd) + " --json F" in have:
                        continue
                    r = {"mode": mode, "detector": detector, **run(cmd)}
                    done.append(r)
                    print(mode, dataset, detector, seed, r["auc_roc"], r["recall"], r["false_positive_rate"],
                          file=sys.stderr, flush=True)
                    OUT.write_text(json.dumps({"what": "differential privacy (issue 23, point 4): the runs behind "
                                               "the README's table", "runs": done}, indent=1) + "\n")


def table(runs: list[dict]) -> str:
    """AUC / caught % / false positives % per data set, detector (and extra flags) and mode, seeds side by side."""
    def key(r: dict) -> tuple[str, str, str]:
        extra = r["command"].split(f"--seed {r['seed']}")[1].replace(" --json F", "")
        for flag in ("--private", "--dp-epsilon 100", "--dp-epsilon 8", "--dp-epsilon 4", "--dp-epsilon 1"):
            extra = extra.replace(flag, "")
        return r["dataset"], " ".join([r["detector"], *extra.split()]), r["mode"]

    cells: dict[tuple[str, str, str], list[str]] = {}
    for r in sorted(runs, key=lambda r: r["seed"]):  # seed 0 first in every cell
        cells.setdefault(key(r), []).append(f"{r['auc_roc']:.3f} / {100 * r['recall']:.0f} / "
                                            f"{100 * r['false_positive_rate']:.1f}")
    modes = sorted({m for _, _, m in cells}, key=lambda m: (m.split()[0] != "plaintext", m.split()[0] != "private",
                                                           m.split()[0], -float(m.split("=")[-1]) if "=" in m else 0))
    rows = sorted({(d, det) for d, det, _ in cells})
    out = ["| data | detector | " + " | ".join(modes) + " |", "|---|---|" + "---|" * len(modes)]
    for d, det in rows:
        out.append(f"| {d} | {det} | " + " | ".join("<br>".join(cells.get((d, det, m), ["–"])) for m in modes) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
