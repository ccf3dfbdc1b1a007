"""The mixture's fleet threshold with and without its colluders left out at the top, on the same trained models
(issue 22, point 2: the threshold attack, two devices of 21 sending every held-out record in the top bin):

- before: the winsorised mean over devices of their exceedance curves, `colluders` (2) winsorised at each side;
- now: the same after `colluders` more devices are left out at the top
  (models.detection.screening.fleet_tail, models.core.aggregation.winsorized_weighted_mean's `above`);
- both ends: measured, not taken (docs/robustness.md): `colluders` devices left out at the bottom as well as at the
  top, then as many winsorised at each side of the rest (`both_ends` here).

Each run is `fedsentry simulate pca --detector gmm` (60 rounds, 10 % a round, non-i.i.d.): the robustness table's
fleets (1 of 11, 2 of 21; nsl-kdd and synthetic; seeds 0-4) with `--adversaries K --attack threshold`, and the honest
100-device fleets (noniid and dirichlet; nsl-kdd, ton-iot, synthetic; seed 0). The threshold attack does not change
training, so each run gives both columns: clean reads the thresholds from the histograms the devices' held-out
scores make, attacked from the same with the adversaries' replaced as `Adversaries.histograms` replaces them; each
device's own threshold is shrunk toward the fleet's as it is in a job, and caught / false positives come from the
same test scores, the test attacks reaching the honest devices in both columns.

    nice -n 10 python benchmarks/mixture_threshold_colluders.py [--seeds 0 1 2 3 4] [--datasets ...] [--fleets 2:21]
        [--honest yes|no|only] [--out FILE]

Writes benchmarks/results/mixture-threshold-colluders.md.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np

import models.detection.screening as screening
import models.mixture.simulator as mixture_simulator
from fedsentry.cli import build_parser
from fedsentry.cli.pca import resolve_detector
from fedsentry.runs.detection import prepare, simulate
from models.core.aggregation import trim_count, winsorized_weighted_mean
from models.detection.attacks import Adversaries
from models.detection.threshold import EDGES, sparse_histogram


def winsorised_only(X: np.ndarray, w: np.ndarray, trim: float, at_least: int = 1, above: int = 0) -> np.ndarray:
    return winsorized_weighted_mean(X, w, trim, at_least)  # nobody left out at the top


def both_ends(X: np.ndarray, w: np.ndarray, trim: float, at_least: int = 1, above: int = 0) -> np.ndarray:
    """`above` devices left out at the bottom as well as the top (never the majority between them, the bottom
    given up first), then as many winsorised at each side of the rest."""
    X, w = np.asarray(X, dtype=float), np.asarray(w, dtype=float)
    n = X.shape[0]
    if not above or not trim_count(n, trim, at_least):
        return winsorized_weighted_mean(X, w, trim, at_least)
    room = (n - 1) // 2
    bottom = min(int(above), room // 2)
    top = min(int(above), room - bottom)
    order = np.argsort(X, axis=0, kind="stable")[bottom:n - top]
    kept, wk = np.take_along_axis(X, order, axis=0), w[order]
    m = n - top - bottom
    k = trim_count(m, trim, at_least)
    if k:
        ordered = np.sort(kept, axis=0)
        kept = np.clip(kept, ordered[k], ordered[m - 1 - k])
    return (kept * wk).sum(axis=0) / wk.sum(axis=0)


RULES = {"before": winsorised_only, "now": winsorized_weighted_mean, "both ends": both_ends}


def run(flags: list[str], k: int) -> dict[str, Any]:
    """One simulate run; caught and false positives (%) and the fleet's threshold under each rule, clean and with
    the first k devices' histograms in the top bin."""
    seen: dict[str, Any] = {"held": []}
    tail, report, shrunk = mixture_simulator.fleet_tail, mixture_simulator.detection_report, \
        mixture_simulator.shrunk_threshold
    seeing = mixture_simulator.devices_seeing

    def fleet_tail(h: list, w: np.ndarray, *rest: Any) -> Any:
        seen["w"], seen["rest"] = w, rest
        return tail(h, w, *rest)

    def scores(y: np.ndarray, s: np.ndarray, at: Any) -> dict[str, float]:
        seen.setdefault("y", y)
        seen.setdefault("s", np.array(s))
        return report(y, s, at)

    def own(s: np.ndarray, *rest: Any) -> float:
        seen["held"].append(np.asarray(s))
        return shrunk(s, *rest)

    def devices(*a: Any, **kw: Any) -> np.ndarray:
        seen["where"] = seeing(*a, **kw)
        return seen["where"]

    mixture_simulator.fleet_tail, mixture_simulator.detection_report = fleet_tail, scores
    mixture_simulator.shrunk_threshold, mixture_simulator.devices_seeing = own, devices
    try:
        args = build_parser().parse_args(["simulate", "pca", "--detector", "gmm", *flags])
        resolve_detector(args)
        data, split, parts = prepare(args)
        simulate(args, "fedem", data, split, parts)
    finally:
        mixture_simulator.fleet_tail, mixture_simulator.detection_report = tail, report
        mixture_simulator.shrunk_threshold, mixture_simulator.devices_seeing = shrunk, seeing
    q = seen["rest"][0]
    honest = [sparse_histogram(s) for s in seen["held"]]
    attacked = Adversaries(k, "threshold").histograms(honest, len(EDGES) - 1) if k else honest
    out: dict[str, Any] = {}
    for rule in RULES:
        for label, hists in (("clean", honest), ("attacked", attacked)):
            screening.winsorized_weighted_mean = RULES[rule]  # type: ignore[assignment]
            try:
                fleet, fleet_tail_ = tail(hists, seen["w"], *seen["rest"])
            finally:
                screening.winsorized_weighted_mean = winsorized_weighted_mean
            thresholds = np.array([shrunk(s, fleet, fleet_tail_, q) for s in seen["held"]])
            where = seen["where"]
            r = report(seen["y"], seen["s"], np.where(where < 0, fleet, thresholds[np.maximum(where, 0)]))
            rates = mixture_simulator.device_rates(seen["s"] > np.where(where < 0, fleet, thresholds[np.maximum(
                where, 0)]), where, seen["y"], len(thresholds))
            out[(rule, label)] = {"caught": 100 * r["recall"], "fp": 100 * r["false_positive_rate"],
                                  "threshold": fleet, "auc": r["auc_roc"], "device_fp": rates}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--datasets", nargs="+", default=["nsl-kdd", "synthetic"], help="for the attacked fleets")
    p.add_argument("--fleets", nargs="+", default=["1:11", "2:21"], help="attacked fleets, adversaries:devices")
    p.add_argument("--honest", choices=("yes", "no", "only"), default="yes", help="the honest 100-device table")
    p.add_argument("--out", default="benchmarks/results/mixture-threshold-colluders.md")
    a = p.parse_args()
    logging.disable(logging.WARNING)
    base = ["--rounds", "60", "--fraction", "0.1"]
    cols = " | ".join(f"{rule}: clean | {rule}: attacked | drop" for rule in RULES)
    lines = ["# The mixture's threshold: colluders left out at the top (issue 22)", "",
             "`nice -n 10 python benchmarks/mixture_threshold_colluders.py` (its docstring says what each column is). "
             "Caught / false positives (%) at each device's own threshold; the test attacks reach the honest devices "
             "in every column (the robustness table's clean cells send them to any device). 'drop': clean minus "
             "attacked, in points of caught.", ""]
    drops: dict[str, list[float]] = {rule: [] for rule in RULES}
    if a.honest != "only":
        lines += [f"| data | fleet | seed | {cols} |", "|---|---|---:|" + "---:|" * 3 * len(RULES)]
        for ds in a.datasets:
            for k, n in (map(int, f.split(":")) for f in a.fleets):
                for seed in a.seeds:
                    r = run(["--dataset", ds, "--clients", str(n), "--seed", str(seed), "--adversaries", str(k),
                             "--attack", "threshold", *base], k)
                    cells = []
                    for rule in RULES:
                        c, t = r[(rule, "clean")], r[(rule, "attacked")]
                        drops[rule].append(c["caught"] - t["caught"])
                        cells += [f"{c['caught']:.1f} / {c['fp']:.2f}", f"{t['caught']:.1f} / {t['fp']:.2f}",
                                  f"{c['caught'] - t['caught']:.1f}"]
                    lines.append(f"| {ds} | {k} of {n} | {seed} | " + " | ".join(cells) + " |")
                    print(lines[-1], flush=True)
        lines += ["", "Drop over every row: " + "; ".join(
            f"{rule} mean {np.mean(v):.1f}, worst {np.max(v):.1f} points, above 2 points in "
            f"{int(np.sum(np.array(v) > 2))} of {len(v)}" for rule, v in drops.items()) + ".", ""]
    if a.honest != "no":
        lines += ["Honest 100-device fleets (seed 0, clean): caught / false positives (%), and the devices' own "
                  "false-positive rates on their normal test records (median / max, devices above 3 %).", "",
                  "| data | partition | " + " | ".join(RULES) + " | " + " | ".join(f"devices {r}" for r in RULES)
                  + " |", "|---|---|" + "---:|" * 2 * len(RULES)]
        for ds in ("nsl-kdd", "ton-iot", "synthetic"):
            for part in ("noniid", "dirichlet"):
                r = run(["--dataset", ds, "--clients", "100", "--partition", part, "--seed", "0", *base], 0)
                cells = [f"{r[(rule, 'clean')]['caught']:.1f} / {r[(rule, 'clean')]['fp']:.2f}" for rule in RULES]
                cells += [f"{100 * d['median']:.2f} / {100 * d['max']:.2f} ({d['above_3_percent']})"
                          for d in (r[(rule, "clean")]["device_fp"] for rule in RULES)]
                lines.append(f"| {ds} | {part} | " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
    Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
