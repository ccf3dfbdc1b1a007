"""`fedsentry bench robustness`: what each attack (models.detection.attacks) does to each detector, with 1 adversary
of 11
devices and 2 of 21: attacks caught at the label-free threshold and AUC, clean and attacked, exactly as
`fedsentry simulate pca --adversaries K --attack NAME` computes them (the same settings, one run each).

Columns: the Gaussian mixture with the support rule (FedEM, the default), the same mixture with the usual robust
aggregator instead (coordinate-wise trimmed mean of the devices' statistics, every component shared:
models.mixture.anchors), federated PCA by FedPG (the default; it uploads a basis) and by FedMM (it uploads
second-moment products the server checks)."""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
from typing import Any

from fedsentry.errors import UsageError
from fedsentry.output import write_results
from fedsentry.runs.detection import algorithm_class, prepare, simulate
from models.detection.attacks import ATTACKS, not_applicable
from models.mixture.anchors import TrimmedFedEM

#: (adversaries, devices)
FLEETS = ((1, 11), (2, 21))
#: (detector, algorithm, column heading): the table compares these two detectors' defences, by name
COLUMNS = (("gmm", "fedem", "gmm, support rule"), ("gmm", TrimmedFedEM.name, "gmm, trimmed mean (anchor)"),
           ("pca", "fedpg", "pca, fedpg"), ("pca", "fedmm", "pca, fedmm"))


def bench(base: argparse.Namespace, datasets: list[str], attacks: list[str]) -> dict[str, Any]:
    """Every (dataset, fleet, column) clean and under each attack that applies to it; `base` holds simulate's
    settings (rounds, fraction, seed, data folder)."""
    rows = []
    for dataset in datasets:
        for k, n in FLEETS:
            for detector, algorithm, _ in COLUMNS:
                for attack in (None, *attacks):
                    why = attack and not_applicable(attack, algorithm, algorithm_class(detector, algorithm))
                    row = {"dataset": dataset, "adversaries": k, "clients": n, "detector": detector,
                           "algorithm": algorithm, "attack": attack}
                    rows.append({**row, "not_applicable": why} if why else {**row, **run_one(base, row)})
    return {"command": shlex.join(["fedsentry", *sys.argv[1:]]), "rounds": base.rounds, "fraction": base.fraction,
            "seed": base.seed, "rows": rows}


def run_one(base: argparse.Namespace, row: dict[str, Any]) -> dict[str, Any]:
    args = copy.copy(base)
    args.dataset, args.clients, args.detector = row["dataset"], row["clients"], row["detector"]
    args.adversaries, args.attack = (row["adversaries"], row["attack"]) if row["attack"] else (0, None)
    args.algorithm = row["algorithm"]
    data, split, parts = prepare(args)
    r = simulate(args, row["algorithm"], data, split, parts)
    print(f"{row['dataset']} {row['adversaries']}/{row['clients']} {row['algorithm']} {row['attack'] or 'clean'}: "
          f"caught {r['recall']:.3f} AUC {r['auc_roc']:.4f} refused {r.get('rejected_uploads', 0)}", file=sys.stderr)
    return {"recall": r["recall"], "auc_roc": r["auc_roc"], "false_positive_rate": r["false_positive_rate"],
            "threshold": r["threshold"], "rejected_uploads": r.get("rejected_uploads", 0),
            "shared_components": r.get("shared_components"), "subspace_distance": r.get("subspace_distance")}


def run(args: argparse.Namespace, base: argparse.Namespace) -> int:
    attacks = args.attacks or list(ATTACKS)
    unknown = [a for a in attacks if a not in ATTACKS]
    if unknown:
        raise UsageError(f"--attacks {unknown[0]}: not an attack (choose from {', '.join(ATTACKS)})")
    base.rounds, base.fraction, base.seed, base.data_dir = args.rounds, args.fraction, args.seed, args.data_dir
    doc = bench(base, args.dataset or ["synthetic"], attacks)
    write_results(args.out, "robustness.md", markdown(doc), doc, args.json)
    return 0


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return ""
    if r.get("not_applicable"):
        return "n/a"
    refused = f", {r['rejected_uploads']} refused" if r["rejected_uploads"] else ""
    return f"{100 * r['recall']:.1f} % / {r['auc_roc']:.3f}{refused}"


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"`{doc['command']}`", "",
             f"Attacks caught at the label-free threshold / AUC-ROC, as `fedsentry simulate pca --adversaries K "
             f"--attack NAME` reports them ({doc['rounds']} rounds, {doc['fraction']} of the devices a round, seed "
             f"{doc['seed']}, non-i.i.d. devices; gmm: test attacks reach the honest devices). \"refused\": uploads "
             "the server's checks refused (the job went on). n/a: the attack means nothing there "
             "(models.detection.attacks)."]
    keyed = {(r["dataset"], r["clients"], r["algorithm"], r["attack"]): r for r in doc["rows"]}
    for dataset in dict.fromkeys(r["dataset"] for r in doc["rows"]):
        for k, n in FLEETS:
            attacks = list(dict.fromkeys(r["attack"] for r in doc["rows"]))
            lines += ["", f"**{dataset}, {k} of {n} devices attacking**", "",
                      "| attack | " + " | ".join(c[2] for c in COLUMNS) + " |", "|---" + "|---:" * len(COLUMNS) + "|"]
            for attack in attacks:
                cells = [_cell(keyed.get((dataset, n, c[1], attack))) for c in COLUMNS]
                lines.append(f"| {attack or 'clean'} | " + " | ".join(cells) + " |")
    notes = sorted({f"{r['attack']} with {r['algorithm']}: {r['not_applicable']}" for r in doc["rows"]
                    if r.get("not_applicable")})
    if notes:
        lines += ["", "n/a: " + "; ".join(notes) + "."]
    return "\n".join(lines) + "\n"
