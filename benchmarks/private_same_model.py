"""Does private mode reach plaintext's model (issue 23 point 5: "the same final model as plaintext within
fixed-point error (AUC within 0.005)")? Plaintext against private gmm, per dataset and seed, at 100 devices, 10 %
a round, the defaults: AUC (the model's ranking), attacks caught % and false positives % (the threshold's).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/private_same_model.py --out DIR
        [--seeds 0 1 2] [--datasets synthetic nsl-kdd ton-iot] [--variant NAME ...]
        [--json benchmarks/results/private-same-model.json] [--md benchmarks/results/private-same-model.md]

runs `fedsentry simulate pca --detector gmm --dataset X --clients 100 --seed S [--private] --json DIR/...` for each
(a run whose JSON is already in DIR is not run again; one process at a time). A variant adds the same arguments to
both modes (VARIANTS), to measure what one difference between the modes costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
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
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for variant in args.variant:
        for dataset in args.datasets:
            for seed in args.seeds:
                plain = run(dataset, seed, False, variant, args.out)
                private = run(dataset, seed, True, variant, args.out)
                delta = private["auc_roc"] - plain["auc_roc"]
                rows.append({"variant": variant, "dataset": dataset, "seed": seed, "plaintext": plain,
                             "private": private, "delta": delta, "within": abs(delta) <= TARGET})
                print(f"{variant} {dataset} seed {seed}: plaintext {cell(plain)}, private {cell(private)} "
                      f"({delta:+.4f})", flush=True)
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
