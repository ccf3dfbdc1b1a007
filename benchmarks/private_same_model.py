"""Does private mode reach plaintext's model (issue 23 point 5: "the same final model as plaintext within
fixed-point error (AUC within 0.005)")? Plaintext against private gmm, per dataset and seed, at 100 devices, 10 %
a round, the defaults: AUC (the model's ranking), attacks caught % and false positives % (the threshold's).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/private_same_model.py --out DIR
        [--seeds 0 1 2] [--datasets synthetic nsl-kdd ton-iot] [--variant NAME ...]
        [--json benchmarks/results/private-same-model.json] [--md benchmarks/results/private-same-model.md]

runs `fedsentry simulate pca --detector gmm --dataset X --clients 100 --seed S [--private] --json DIR/...` for each
(a run whose JSON is already in DIR is not run again; one process at a time). A variant adds arguments to either
mode (VARIANTS), to measure what one difference between the modes costs.

    ... private_same_model.py --out DIR --rounding [--json benchmarks/results/private-same-model-rounding.json]

runs, in this process, the two computations between "as-private" plaintext and private mode: plaintext with
private mode's rules and float64 uploads (plaintext's own default is float32), and private mode with its sums in
the clear (no masks, no fixed point): where the rounding is what is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import product
from pathlib import Path

from private_bytes import command, runs_parser  # (benchmarks/, beside this script)

#: arguments added to (plaintext's runs, private mode's runs); runs with the same arguments share their file
VARIANTS: dict[str, tuple[list[str], list[str]]] = {
    "default": ([], []),
    # plaintext seeds as private mode does (models.mixture.growing): no device's clusters
    "grow": (["--seeding", "grow"], []),
    # and bounds the support rule's mass share from sums as private mode does (models.mixture.heaviest.mass_shares)
    "as-private": (["--seeding", "grow", "--mass-share", "bound"], []),
}
TARGET = 0.005


def run(dataset: str, seed: int, private: bool, variant: str, folder: Path) -> dict:
    extra = VARIANTS[variant][int(private)]
    out = folder / f"{dataset}-s{seed}{''.join(extra).replace('--', '-')}{'-private' if private else ''}.json"
    cmd = command("gmm", dataset, seed, private, out, extra)
    if not out.exists():
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    r = json.loads(out.read_text())
    return {"command": " ".join([*cmd[:-1], "F"]), "auc_roc": r["auc_roc"], "caught": 100 * r["recall"],
            "false_positives": 100 * r["false_positive_rate"], "shared_components": r.get("shared_components"),
            "swaps": r.get("swaps"), "threshold": r.get("threshold")}


def unrounded(dataset: str, seed: int, private: bool, folder: Path) -> dict:
    """Plaintext as private mode with float64 uploads, or private mode with its sums in the clear (in process)."""
    out = folder / f"{dataset}-s{seed}-{'private-clear' if private else 'as-private-float64'}.json"
    if not out.exists():
        from fedsentry.cli import build_parser
        from fedsentry.runs.detection import prepare
        from fedsentry.runs.mixture import mixture_simulation
        from models.mixture.fedem import default_components

        argv = command("gmm", dataset, seed, private, out, [] if private else VARIANTS["as-private"][0])[1:-2]
        args = build_parser(argv).parse_args(argv)
        args.private_clear = private
        data, split, parts = prepare(args)
        params = {} if private else {"float32": False, "components": default_components(len(data.feature_names))}
        r = mixture_simulation(args, "fedem", data, split, parts, params=params)
        out.write_text(json.dumps({k: r[k] for k in ("auc_roc", "shared_components", "swaps")}))
    return json.loads(out.read_text())


def rounding(datasets: list[str], seeds: list[int], folder: Path) -> list[dict]:
    rows = []
    for dataset in datasets:
        for seed in seeds:
            plain = run(dataset, seed, False, "as-private", folder)
            private = run(dataset, seed, True, "default", folder)
            row = {"dataset": dataset, "seed": seed, "plaintext float32": plain,
                   "plaintext float64": unrounded(dataset, seed, False, folder),
                   "private, sums in the clear": unrounded(dataset, seed, True, folder), "private": private}
            rows.append(row)
            print(" | ".join([f"{dataset} {seed}", *(f"{k}: {v['auc_roc']:.6f} ({v['shared_components']} shared, "
                                                       f"{v['swaps']} swaps)" for k, v in row.items()
                                                       if isinstance(v, dict))]), flush=True)
    return rows


def pair(variant: str, dataset: str, seed: int, folder: Path) -> dict:
    """Both modes' runs of one variant, dataset and seed, and their AUC's difference against the target."""
    plain, private = run(dataset, seed, False, variant, folder), run(dataset, seed, True, variant, folder)
    delta = private["auc_roc"] - plain["auc_roc"]
    print(f"{variant} {dataset} seed {seed}: plaintext {cell(plain)}, private {cell(private)} ({delta:+.4f})",
          flush=True)
    return {"variant": variant, "dataset": dataset, "seed": seed, "plaintext": plain, "private": private,
            "delta": delta, "within": abs(delta) <= TARGET}


def cell(r: dict) -> str:
    return f"{r['auc_roc']:.4f} / {r['caught']:.1f} / {r['false_positives']:.2f}"


def table(rows: list[dict]) -> str:
    lines = ["| variant | data | seed | plaintext: AUC / caught % / FP % | private: AUC / caught % / FP % | "
             "private - plaintext AUC | within 0.005 | components shared: plaintext / private | fleet threshold: "
             "plaintext / private |",
             "|---|---|---:|---|---|---:|---|---|---|"]
    for r in rows:
        p, q = r["plaintext"], r["private"]
        lines.append(f"| {r['variant']} | {r['dataset']} | {r['seed']} | {cell(p)} | {cell(q)} | {r['delta']:+.4f} | "
                     f"{'yes' if r['within'] else '**no**'} | {p['shared_components']} / {q['shared_components']} | "
                     f"{p['threshold']:.2f} / {q['threshold']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = runs_parser(__doc__, [0, 1, 2])
    p.add_argument("--variant", nargs="+", default=["default"], choices=sorted(VARIANTS))
    p.add_argument("--json", type=Path, help="where to write every run's command and figures")
    p.add_argument("--md", type=Path, help="where to write the table")
    p.add_argument("--rounding", action="store_true", help="what is left between as-private plaintext and private "
                   "mode: both without their rounding (in process)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.rounding:
        rows = rounding(args.datasets, args.seeds, args.out)
        if args.json:
            args.json.write_text(json.dumps({"what": "as-private plaintext (float32, float64 uploads) against private "
                                             "mode (sums in the clear, secure sums): AUC, components shared, swaps",
                                             "runs": rows}, indent=1) + "\n")
        return 0
    rows = [pair(variant, dataset, seed, args.out)
            for variant, dataset, seed in product(args.variant, args.datasets, args.seeds)]
    text = table(rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"what": "private gmm against plaintext gmm, same seed (issue 23 point 5)",
                                         "target_auc": TARGET, "runs": rows}, indent=1) + "\n")
    if args.md:
        args.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
