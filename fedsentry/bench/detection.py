"""`fedsentry bench detection`: the default detector, exactly as `fedsentry simulate pca` runs it with no flags,
on every dataset present, over partitions and seeds; the README's detection table comes from here.

Each run is `fedsentry simulate pca --dataset D --partition P --seed S` (100 clients, the default detector and
its defaults). Per dataset the table gives the median and the range over its runs of AUC, F1, attacks caught and
false-positive rate at the label-free threshold, the devices' false-positive spread with each device's own
threshold (shrunk toward the fleet's) and with the fleet's one threshold, and the stability check of issue 21:
no run catches fewer than 0.9 x the median of its dataset's runs. `--readme` rewrites the table between the
README's `<!-- detection-table -->` markers.
"""

from __future__ import annotations

import argparse
import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.data import datasets
from fedsentry.errors import UsageError
from fedsentry.output import write_results

MARKERS = ("<!-- detection-table -->", "<!-- /detection-table -->")
NAMED = ("synthetic", "nsl-kdd", "ton-iot")


def run(args: argparse.Namespace, simulate_args: Callable[[list[str]], tuple[argparse.Namespace, str]]) -> int:
    """`simulate_args(flags)`: the settings and algorithm the detection front end (`fedsentry simulate pca`) would
    run with these flags."""
    from fedsentry.runs.detection import prepare, simulate

    if args.readme:  # a README it cannot write to is refused before the runs, not after
        if args.simulate:
            raise UsageError("--readme takes the defaults' table: leave out --simulate (its runs go to --out/--json)")
        rewrite_readme(Path(args.readme), None)
    extra = shlex.split(args.simulate or "")
    names = args.datasets or [n for n in NAMED if n == "synthetic" or
                              datasets.shared_data_available(n, args.data_dir)]
    runs: list[dict[str, Any]] = []
    for name in names:
        for partition in args.partitions:
            for seed in range(args.seeds):
                argv = ["--dataset", name, "--partition", partition, "--seed", str(seed)]
                if args.data_dir:
                    argv += ["--data-dir", args.data_dir]
                argv += extra
                sim_args, algorithm = simulate_args(argv)
                t0 = time.perf_counter()
                data, split, parts = prepare(sim_args)
                r = simulate(sim_args, algorithm, data, split, parts)
                runs.append({"dataset": name, "partition": partition, "seed": seed, "clients": r["clients"],
                             "fraction": r["fraction"], "rounds": r["rounds"], "auc_roc": r["auc_roc"], "f1": r["f1"],
                             "recall": r["recall"], "false_positive_rate": r["false_positive_rate"],
                             "devices": r["device_false_positive_rate"], "fleet_threshold": r["fleet_threshold"],
                             "seconds": time.perf_counter() - t0})
    result = {"command": command(args), "simulate": args.simulate, "runs": runs, "summary": summarise(runs)}
    text = markdown(result)
    write_results(args.out, "detection.md", text, result, args.json)
    if args.readme:
        rewrite_readme(Path(args.readme), text)
    return 0


def command(args: argparse.Namespace) -> str:
    out = "fedsentry bench detection"
    if args.datasets:
        out += " --datasets " + " ".join(args.datasets)
    if list(args.partitions) != ["iid", "noniid", "dirichlet"]:
        out += " --partitions " + " ".join(args.partitions)
    if args.seeds != 5:
        out += f" --seeds {args.seeds}"
    if args.simulate:
        out += f" --simulate {shlex.quote(args.simulate)}"
    return out + (f" --readme {args.readme}" if args.readme else "")


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name in dict.fromkeys(r["dataset"] for r in runs):
        mine = [r for r in runs if r["dataset"] == name]
        caught = np.array([r["recall"] for r in mine])
        noniid = [r for r in mine if r["partition"] != "iid" and r["devices"]]
        rows.append({
            "dataset": name, "runs": len(mine),
            **{k: spread([r[k] for r in mine]) for k in ("auc_roc", "f1", "recall", "false_positive_rate")},
            "worst_device_fpr": spread([r["devices"]["max"] for r in noniid]),
            "worst_device_fpr_fleet_threshold": spread([r["fleet_threshold"]["device_false_positive_rate"]["max"]
                                                        for r in noniid]),
            "recall_fleet_threshold": spread([r["fleet_threshold"]["recall"] for r in mine]),
            "normal_records_per_device": float(np.median([r["devices"]["normal_records_median"] for r in noniid]))
            if noniid else None,
            # devices above 3 % per run: seen, expected by chance at the run's own rate, shown by a binomial test
            **{f"devices_{k}": spread([r["devices"][k] for r in noniid if k in r["devices"]]) for k in
               ("above_3_percent", "above_3_percent_by_chance", "significantly_above_3_percent")},
            "stable": bool(caught.min() >= 0.9 * np.median(caught)),
            "least_caught_over_median": float(caught.min() / np.median(caught)) if np.median(caught) else None,
        })
    return rows


def spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": float(np.median(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def markdown(result: dict[str, Any]) -> str:
    def cell(s: dict[str, float] | None, pct: bool = False, digits: int = 4) -> str:
        if s is None:
            return "–"
        f = (lambda v: f"{100 * v:.{digits}f} %") if pct else (lambda v: f"{v:.{digits}f}")
        return f"{f(s['median'])} ({f(s['min'])}–{f(s['max'])})"

    runs, extra = result["runs"], result.get("simulate")
    parts = sorted({r["partition"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    first = runs[0] if runs else {"clients": "–", "fraction": "–", "rounds": "–"}
    lines = [
        f"Default detector (gmm, fedem, every default{', then ' + extra if extra else ''}), "
        f"`fedsentry simulate pca --dataset D --partition P --seed S{' ' + extra if extra else ''}` "
        f"for P in {', '.join(parts)} and S in {seeds[0] if seeds else '–'}..{seeds[-1] if seeds else '–'}: "
        f"{first['clients']} clients, {first['fraction']} sampled per round, {first['rounds']} rounds. "
        "Median (least–most) over each dataset's runs, at the label-free threshold with each device's own "
        "threshold shrunk toward the fleet's. Worst device: the largest false-positive rate of one device on the "
        "normal test records it sees, non-i.i.d. runs (noniid, dirichlet), own thresholds vs the fleet's one "
        "threshold. Devices above 3 %: of the 100 devices of a non-i.i.d. run, how many were seen above 3 %, how many "
        "would be by chance if each had the run's own rate (binomial, on the records it saw), and how many a "
        "binomial test shows above 3 % (family-wise 5 %). "
        "Stable: no run catches fewer than 0.9 × its dataset's median. "
        f"Reproduce: `{result['command']}`.",
        "",
        "| data | runs | AUC | F1 | caught | FP rate | worst device, own / fleet threshold | normal records per "
        "device | devices above 3 %: seen / by chance / shown | caught, fleet threshold | stable (least / median) |",
        "|---|---:|---|---|---|---|---|---:|---|---|---|",
    ]
    for s in result["summary"]:
        ratio = s["least_caught_over_median"]
        stable = ("yes" if s["stable"] else "**no**") + (f" ({ratio:.2f})" if ratio is not None else "")
        records = s["normal_records_per_device"]
        above = " / ".join("–" if s.get(f"devices_{k}") is None else f"{s[f'devices_{k}']['median']:.{d}f}"
                           for k, d in (("above_3_percent", 0), ("above_3_percent_by_chance", 1),
                                        ("significantly_above_3_percent", 0)))
        lines.append(
            f"| {s['dataset']} | {s['runs']} | {cell(s['auc_roc'])} | {cell(s['f1'], digits=3)} | "
            f"{cell(s['recall'], True, 1)} | {cell(s['false_positive_rate'], True, 2)} | "
            f"{cell(s['worst_device_fpr'], True, 1)} / {cell(s['worst_device_fpr_fleet_threshold'], True, 1)} | "
            f"{'–' if records is None else f'{records:.0f}'} | {above} | "
            f"{cell(s['recall_fleet_threshold'], True, 1)} | "
            f"{stable} |")
    lines += ["", "Each run:", "",
              "| data | partition | seed | AUC | F1 | caught | FP rate | worst device (own / fleet) | s |",
              "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in runs:
        dev = (f"{100 * r['devices']['max']:.1f} % / "
               f"{100 * r['fleet_threshold']['device_false_positive_rate']['max']:.1f} %" if r["devices"] else "–")
        lines.append(f"| {r['dataset']} | {r['partition']} | {r['seed']} | {r['auc_roc']:.4f} | {r['f1']:.3f} | "
                     f"{100 * r['recall']:.1f} % | {100 * r['false_positive_rate']:.2f} % | {dev} | "
                     f"{r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def rewrite_readme(path: Path, text: str | None) -> None:
    """Replace what stands between the README's markers with the summary (the per-run table stays in the
    benchmark's own file); with no text, only check that it can."""
    try:
        readme = path.read_text()
    except OSError as e:
        raise UsageError(f"--readme {path}: {e.strerror}") from None
    start, end = MARKERS
    if start not in readme or end not in readme:
        raise UsageError(f"--readme {path}: no {start} ... {end} markers to write the table between")
    if text is None:
        return
    summary = text.split("\n\nEach run:")[0]
    block = f"{start}\n{summary}\n{end}"
    path.write_text(re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, readme, flags=re.S))
