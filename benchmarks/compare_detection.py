"""Two `fedsentry bench detection --json` results, paired run by run: per dataset the medians of AUC and F1, the
attacks caught (median and least), the stability ratio (least / median) and how many runs the second catches fewer
attacks in than the first (with the median paired difference).

    python benchmarks/compare_detection.py benchmarks/results/detection.json benchmarks/results/detection-ridges.json
"""

from __future__ import annotations

import json
import sys

import numpy as np


def rows(path: str) -> dict[tuple[str, str, int], dict]:
    with open(path) as f:
        return {(r["dataset"], r["partition"], r["seed"]): r for r in json.load(f)["runs"]}


def compare(first: str, second: str) -> str:
    a, b = rows(first), rows(second)
    lines = ["| data | run | AUC (median) | F1 | caught median (least) | least / median | paired: runs worse |",
             "|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(k[0] for k in a):
        keys = [k for k in a if k[0] == name and k in b]
        if not keys:  # a dataset the second did not run
            continue
        for label, runs in ((first, a), (second, b)):
            caught = np.array([runs[k]["recall"] for k in keys])
            paired = ""
            if runs is b:
                diff = caught - np.array([a[k]["recall"] for k in keys])
                paired = f"{int((diff < 0).sum())} of {len(keys)} (median {100 * np.median(diff):+.1f} pt)"
            lines.append(f"| {name} | {label} | {np.median([runs[k]['auc_roc'] for k in keys]):.4f} | "
                         f"{np.median([runs[k]['f1'] for k in keys]):.3f} | {100 * np.median(caught):.1f} % "
                         f"({100 * caught.min():.1f} %) | {caught.min() / np.median(caught):.2f} | {paired} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(compare(sys.argv[1], sys.argv[2]))
