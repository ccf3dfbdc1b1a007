"""Why private mode catches fewer attacks than plaintext on 11 devices (issue 23; docs/privacy.md, "On 11 devices").

For each dataset and seed, runs `fedsentry simulate pca --detector gmm --dataset X --clients 11 --rounds 60 --fraction
0.2 --seed S` in plaintext and with `--private`, and four private runs that each change one thing (diagnostics, not
options of the product):

- `splits 0`: no swaps (`--splits 0`);
- `no unsupported split`: a swap never splits a component no device supports (`swaps.keeps_support` also asks for
  one supporter): whether such splits are what private mode loses;
- `plaintext threshold`: the fleet's threshold read from the private run's own held-out histograms by plaintext's
  rule (`models.detection.screening.fleet_tail`, its colluders left out at the top and winsorised), which a secure
  sum cannot apply (it sees no device's histogram): the yardstick of private mode's own, each device clipping its
  curve (`models.detection.tail_clip`);
- `support share 0.4 %`: SUPPORT_SHARE 0.005 -> 0.004 everywhere (the support count and each device's own
  components): whether records just below the share on every device are what scores high.

For the private run it prints, per device, the held-out scores' threshold quantile, and the held-out records that
score above 100 x the fleet's threshold: how many lie nearest a component the device does not score with (neither
shared nor its own), its own share of training records there (the support share is 0.005) and that component's
supporters.

    FEDSENTRY_DATA_DIR=... OMP_NUM_THREADS=1 nice -n 10 python benchmarks/private_small_fleet.py [--seeds 0 1 2]
        [--datasets synthetic] [--json benchmarks/results/private-small-fleet.json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import models.detection.private as private_threshold
import models.mixture.control as control
import models.mixture.detector as detector
import models.mixture.simulator as mixture_simulator
import models.mixture.summed as summed
import models.mixture.swaps as swaps
from fedsentry.cli import main as cli
from models.detection.screening import fleet_tail
from models.mixture.fedem import FedEM, colluders
from models.mixture.gmm import nearest
from models.mixture.spec import MixtureJobSpec

#: the plaintext rule's colluders (the default support rule's)
COLLUDERS = colluders(inspect.signature(FedEM.__init__).parameters["min_support"].default)
#: a held-out record "far" from the model: above this many times the fleet's threshold
FAR = 100.0


def command(dataset: str, seed: int, private: bool, extra: tuple[str, ...] = ()) -> list[str]:
    return ["simulate", "pca", "--detector", "gmm", "--dataset", dataset, "--clients", "11", "--rounds", "60",
            "--fraction", "0.2", "--seed", str(seed), *(["--private"] if private else []), *extra]


@contextmanager
def patched(module: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def simulate(args: list[str], seen: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `fedsentry simulate` in this process; `seen` receives its held-out parts, devices, threshold histograms
    and swaps (`swaps`: each one's split component, its records and supporters, whether a merge touched it before, the
    merged pair and their records, and the records its new half holds at the next swap)."""
    seen = {} if seen is None else seen
    split, personalise, tail = mixture_simulator.split_holdout, detector.MixtureDetector.personalise, \
        private_threshold.private_tail
    decide = swaps.plan

    def plan(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, reg: float, records_per_mass: float, least: int,
             support: np.ndarray | None = None) -> Any:
        s = decide(R, S1, S2, reg, records_per_mass, least, support)
        if s is not None and support is not None:  # (a merged column is where private mode counts otherwise)
            done = seen.setdefault("swaps", [])
            before = {c for w in done for c in w["merged"]}
            if done:  # what the last swap's new half holds now (a split that did not take: hardly anything)
                done[-1]["new_half_records_at_next"] = round(float(R[done[-1]["merged"][1]] * records_per_mass))
            done.append({"split": s.k, "records": round(float(R[s.k] * records_per_mass)),
                         "supporters": float(support[s.k]), "merged": [s.a, s.b],
                         "merged_records": [round(float(R[c] * records_per_mass)) for c in (s.a, s.b)],
                         "split_was_merged": s.k in before})
        return s

    def split_holdout(parts: Any, holdout: float) -> Any:
        fit, held = split(parts, holdout)
        seen["held"] = held
        return fit, held

    def own(self: Any, records: Any) -> Any:
        seen.setdefault("devices", []).append(personalise(self, records))
        return self

    def private_tail(histograms: Any, weight: Any, q: float, holdout: float, transport: Any, *winsor: Any) -> Any:
        seen["histograms"], seen["weight"], seen["q"], seen["holdout"] = histograms, weight, q, holdout
        return tail(histograms, weight, q, holdout, transport, *winsor)

    with tempfile.TemporaryDirectory() as tmp, patched(mixture_simulator, "split_holdout", split_holdout), \
            patched(detector.MixtureDetector, "personalise", own), \
            patched(private_threshold, "private_tail", private_tail), patched(swaps, "plan", plan), \
            patched(summed, "plan", plan):
        out = Path(tmp) / "r.json"
        cli([*args, "--json", str(out)])
        return dict(json.loads(out.read_text()))


def plaintext_rule(histograms: Any, weight: Any, q: float, holdout: float, transport: Any, *winsor: Any) -> Any:
    """Plaintext's threshold rule on the private run's histograms (a diagnostic: a secure sum cannot apply it; private
    mode's clipped threshold comes within half a level of it)."""
    return fleet_tail(histograms, np.asarray(weight), q, MixtureJobSpec(features=["x"]).guard().device_trim,
                      holdout, COLLUDERS)


def one_supporter(keeps: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda R, support: keeps(R, support) & (np.asarray(support, dtype=float) >= 1)


@contextmanager
def share(value: float) -> Iterator[None]:
    with patched(control, "SUPPORT_SHARE", value), patched(summed, "SUPPORT_SHARE", value), \
            patched(detector, "SUPPORT_SHARE", value):
        yield


def figures(r: dict[str, Any]) -> dict[str, Any]:
    return {"auc_roc": round(r["auc_roc"], 4), "caught": round(100 * r["recall"], 1),
            "false_positive_rate": round(100 * r["false_positive_rate"], 2), "threshold": round(r["threshold"], 1),
            "swaps": r.get("swaps"), "shared_components": r["shared_components"]}


def devices_far(seen: dict[str, Any], threshold: float) -> list[dict[str, Any]]:
    """Per device: its held-out scores' quantile, and its held-out records far above the threshold (FAR): how many
    lie nearest a component the device does not score with (neither shared nor its own), the most of its training
    records any such component holds (its own share there: the support share is 0.005), and how many devices
    support that component (at least the share of their training records in it)."""
    devices = seen["devices"][-len(seen["held"]):]
    m = devices[0].mixture_
    fit_share = np.array([d.fit_counts_ / max(d.fit_counts_.sum(), 1) for d in devices])
    supporters = (fit_share >= control.SUPPORT_SHARE).sum(axis=0)
    rows = []
    for i, (dev, held) in enumerate(zip(devices, seen["held"])):
        s = np.asarray(dev.score_samples(held))
        far = s > FAR * threshold
        near = nearest(dev.preprocessor_.transform(held[far]), m.means) if far.any() else np.zeros(0, np.int64)
        unused = np.unique(near[~dev.active_[near]])
        row = {"device": i, "training_records": int(dev.fit_counts_.sum()),
               "quantile": round(float(np.quantile(s, seen["q"])), 1), "far": int(far.sum()),
               "far_nearest_unused": int((~dev.active_[near]).sum())}
        if len(unused):
            row["own_share_there"] = round(float(fit_share[i, unused].max()), 4)
            row["supporters_there"] = int(supporters[unused].max())
        rows.append(row)
    return rows


def counted(personalise: Callable[..., Any]) -> Callable[..., Any]:
    """personalise that keeps the device's count of training records per component (for `devices_far`)."""

    def own(self: Any, records: Any) -> Any:
        out = personalise(self, records)
        X = records if isinstance(records, np.ndarray) else np.vstack(list(records))
        self.fit_counts_ = np.bincount(nearest(self.preprocessor_.transform(X), self.mixture_.means),
                                       minlength=self.mixture_.n_components)
        return out

    return own


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["synthetic"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    logging.disable(logging.WARNING)
    results = []
    for dataset in a.datasets:
        for seed in a.seeds:
            row: dict[str, Any] = {"dataset": dataset, "seed": seed,
                                   "command": "fedsentry " + " ".join(command(dataset, seed, True))}
            plain: dict[str, Any] = {}
            row["plaintext"] = figures(simulate(command(dataset, seed, False), plain))
            row["plaintext_swaps"] = plain.get("swaps", [])
            for name, extra in (("private", ()), ("splits 0", ("--splits", "0"))):
                seen: dict[str, Any] = {}
                with patched(detector.MixtureDetector, "personalise", counted(detector.MixtureDetector.personalise)):
                    r = simulate(command(dataset, seed, True, extra), seen)
                row[name] = figures(r)
                row[name]["threshold_by_plaintext_rule"] = round(float(plaintext_rule(
                    seen["histograms"], seen["weight"], seen["q"], seen["holdout"], None)[0]), 1)
                row[f"{name} devices"] = devices_far(seen, r["threshold"])
                row[f"{name} swaps"] = seen.get("swaps", [])
            with patched(swaps, "keeps_support", one_supporter(swaps.keeps_support)):
                row["no unsupported split"] = figures(simulate(command(dataset, seed, True)))
                row["no unsupported split, plaintext"] = figures(simulate(command(dataset, seed, False)))
            with patched(private_threshold, "private_tail", plaintext_rule):
                row["plaintext threshold"] = figures(simulate(command(dataset, seed, True)))
            with share(0.004):
                row["support share 0.4 %"] = figures(simulate(command(dataset, seed, True)))
            results.append(row)
            print(json.dumps(row))
    print("\n| data | seed | plaintext | private | splits 0 | no unsupported split (private / plaintext) | "
          "plaintext threshold | support share 0.4 % |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results:
        def cell(f: dict[str, Any]) -> str:
            return f"{f['auc_roc']:.4f} / {f['caught']:.1f} % / {f['threshold']:.1f}"
        print(f"| {row['dataset']} | {row['seed']} | {cell(row['plaintext'])} | {cell(row['private'])} | "
              f"{cell(row['splits 0'])} | {cell(row['no unsupported split'])} / "
              f"{cell(row['no unsupported split, plaintext'])} | {cell(row['plaintext threshold'])} | "
              f"{cell(row['support share 0.4 %'])} |")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
