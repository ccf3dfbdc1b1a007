"""`fedsentry simulate pca` and `fedsentry bench pca`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from fedsentry.cli.common import add_federation_args, non_negative_int, positive_float, positive_int, share, unit_open
from fedsentry.data import datasets
from fedsentry.output import write_json
from fedsentry.runs.pca import prepare, simulate
from models.detection.attacks import ATTACKS
from models.detection.robust import TRIM_CRITERIA
from models.families import DEFAULT_DETECTOR, DETECTORS, algorithm_default, spec_default
from models.kernel import DEFAULT_COMPONENTS, KERNELS, MAX_COMPONENTS, MIN_COMPONENTS
from models.mixture import ALGORITHMS as MIXTURE_ALGORITHMS
from models.partition import PARTITIONS
from models.pca import ALGORITHMS

log = logging.getLogger("fedsentry.pca")



def register(groups: dict[str, Any], verbs: Any) -> None:
    sim = groups["simulate"].add_parser("pca", help="federated anomaly detection (PCA or Gaussian mixture), in one "
                                        "process")
    add_data_args(sim)
    add_federation_args(sim)
    add_pca_args(sim)
    sim.add_argument("--algorithm", choices=sorted({*ALGORITHMS, *MIXTURE_ALGORITHMS}),
                     help="pca: fedpg (default), fedpe, fedmm, centralized, local; gmm: fedem (default), centralized")
    add_kernel_args(sim)
    sim.add_argument("--select", action="store_true", help="gmm: choose the ridge without labels, the one whose "
                     "held-out records are likeliest (trains one mixture per candidate ridge: README)")
    sim.add_argument("--json", metavar="PATH", help="write the result as JSON (- for stdout)")
    sim.set_defaults(func=run_simulate)

    bench = groups["bench"].add_parser("pca", help="every PCA algorithm, the Gaussian mixture, IsolationForest and "
                                       "nearest-neighbour distance on one split")
    add_data_args(bench)
    add_federation_args(bench)
    add_pca_args(bench)
    add_kernel_args(bench)
    bench.add_argument("--out", default="benchmarks/results", help="folder for the table and plot")
    bench.add_argument("--json", metavar="PATH", help="write all results as JSON (- for stdout)")
    bench.add_argument("--quick", action="store_true", help="fewer scoring repetitions (for tests)")
    bench.set_defaults(func=run_bench)

    robust = groups["bench"].add_parser("robustness", help="each attack x {gmm, pca} x {1 of 11, 2 of 21 devices "
                                        "attacking}: attacks caught and AUC, clean and attacked (docs/robustness.md)")
    robust.add_argument("--dataset", action="append", help=f"named dataset, repeatable: {', '.join(datasets.DATASETS)} "
                        "(default synthetic)")
    robust.add_argument("--data-dir", help="where named datasets live (default $FEDSENTRY_DATA_DIR or ../shared/data)")
    robust.add_argument("--attacks", nargs="+", metavar="NAME", help=f"only these ({', '.join(ATTACKS)}; default all)")
    add_federation_args(robust, rounds=60, clients=False)
    robust.add_argument("--out", default="benchmarks/results", help="folder for robustness.md")
    robust.add_argument("--json", metavar="PATH", help="write all results as JSON (- for stdout)")
    robust.set_defaults(func=run_robustness)


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (one of --dataset, --normal/--abnormal, --csv)")
    g.add_argument("--dataset", help=f"named dataset: {', '.join(datasets.DATASETS)} (default nsl-kdd where "
                   "the shared data is present, synthetic otherwise)")
    g.add_argument("--normal", metavar="CSV", help="CSV of normal records")
    g.add_argument("--abnormal", metavar="CSV", help="CSV of attack records")
    g.add_argument("--csv", metavar="CSV", help="one CSV with a label column")
    g.add_argument("--label-column", help="label column (default: label, outcome, class or attack)")
    g.add_argument("--normal-value", default="0", help="label value of normal rows with --csv (default 0)")
    g.add_argument("--data-dir", help="where named datasets live (default $FEDSENTRY_DATA_DIR or ../shared/data)")
    g.add_argument("--contamination", type=share, default=0.0,
                   help="mix this share of attack rows into the training records (default 0)")
    g.add_argument("--adversaries", type=non_negative_int, default=0, metavar="K",
                   help="the first K devices attack (--attack); test attacks reach the honest devices")
    g.add_argument("--attack", choices=ATTACKS, help="what the adversaries do (docs/robustness.md). compliant "
                   "(default): train honestly on their normal records plus 300 attack records of the three commonest "
                   "kinds and upload true statistics; inflate: the same records, claiming the most records the "
                   "statistics phase admits; max-variance: all of a device's variance on one direction, within the "
                   "checks; non-psd: second moments with a +1e4 off-diagonal entry, sums and diagonal consistent "
                   "(gmm, or pca with fedmm); threshold: every held-out error in the top histogram bin; random, "
                   "scaled, rotated (pca): the honest upload replaced by noise, x1000, or turned away from the "
                   "consensus")


def add_kernel_args(p: argparse.ArgumentParser) -> None:
    """Kernel PCA flags (simulate and bench; the demo's MQTT job does not take them yet)."""
    p.add_argument("--kernel", choices=KERNELS, default="none",
                   help="rff: kernel PCA through random Fourier features of the standardised records (default none)")
    p.add_argument("--kernel-features", type=positive_int, default=DEFAULT_COMPONENTS,
                   help=f"rff: number of random Fourier features D, {MIN_COMPONENTS}..{MAX_COMPONENTS} "
                   f"(default {DEFAULT_COMPONENTS}); --rank must be below it")
    p.add_argument("--kernel-gamma", type=positive_float,
                   help="rff: Gaussian kernel width gamma in exp(-gamma ||x - y||^2) (default 1/(2 x features), "
                   "the median heuristic on z-scored records)")


def add_pca_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--detector", choices=DETECTORS,
                   help="gmm: negative log-likelihood under a federated Gaussian mixture (recommended); pca: "
                   f"reconstruction error from a federated subspace (the paper's) (default {DEFAULT_DETECTOR}, or "
                   "pca when --algorithm names a PCA algorithm)")
    g = p.add_argument_group("gmm (Gaussian mixture) settings")
    g.add_argument("--components", type=positive_int, help="gmm: mixture components (default: the most of 128, "
                   "64, 32, ... whose uploads fit 256 KiB per device and round)")
    g.add_argument("--reg", type=positive_float, help="gmm: ridge added to every covariance, in standardised units "
                   f"(default {algorithm_default('gmm', 'reg')})")
    g.add_argument("--hard-rounds", type=int, help="gmm: k-means rounds after seeding before EM rounds (default "
                   f"{algorithm_default('gmm', 'hard_rounds')}: k-means rounds throughout)")
    g.add_argument("--no-seed-rows", action="store_true", help="gmm: do not keep each device's seeding clusters as "
                   "its first control-variate row (README)")
    g.add_argument("--min-support", type=non_negative_int, help="gmm (fedem): devices that must support a "
                   "component for it to join the fleet's model; the others stay personal (default "
                   f"{algorithm_default('gmm', 'min_support')}; at most half a small fleet; 0 turns the rule off)")
    g.add_argument("--holdout", type=share, default=spec_default("gmm", "holdout"), help="gmm: share of each "
                   "device's records held out of training; the threshold is read from their scores (default "
                   f"{spec_default('gmm', 'holdout')})")
    p.add_argument("--rank", type=positive_int, default=3, help="pca: subspace dimension k (default 3)")
    p.add_argument("--local-steps", type=positive_int, help="fedpe/fedpg: local steps per round (default 10)")
    p.add_argument("--rho", type=positive_float, help="fedpe/fedpg: ADMM penalty (default: the number of features)")
    p.add_argument("--lr", type=positive_float, help="fedpe/fedpg: local step size (default: 1/L from each client's "
                   "curvature)")
    p.add_argument("--oversample", type=int, help="fedmm: extra block columns (default 6)")
    p.add_argument("--bits", type=int, choices=range(2, 17), metavar="{2..16}", help="fedmm: quantise uploads")
    p.add_argument("--partition", choices=PARTITIONS, default="noniid", help="how records are split (default noniid)")
    p.add_argument("--partition-feature", help="noniid: feature to sort on (default: most distinct values)")
    p.add_argument("--alpha", type=positive_float, default=0.5, help="dirichlet: concentration (default 0.5)")
    p.add_argument("--quantile", type=unit_open, help="threshold quantile of normal errors (default "
                   f"{spec_default('gmm', 'quantile')} for gmm, whose errors are held-out records', "
                   f"{spec_default('pca', 'quantile')} for pca)")
    p.add_argument("--trim", type=share, default=0.0,
                   help="leave this share of the most suspicious training records out of the statistics (default 0)")
    p.add_argument("--trim-by", choices=TRIM_CRITERIA, default="distance",
                   help="distance: federation-wide cut on distance from the mean (default); residual: each "
                   "client drops its worst-reconstructed share, re-evaluated as Z improves")


def resolve_detector(args: argparse.Namespace) -> None:
    """--detector as given, else the family of --algorithm where only one family has it (fedpg, local: pca),
    else the default detector."""
    if args.detector is None:
        algorithm = getattr(args, "algorithm", None)
        only_pca = algorithm in ALGORITHMS and algorithm not in MIXTURE_ALGORITHMS
        args.detector = "pca" if only_pca else DEFAULT_DETECTOR


def run_simulate(args: argparse.Namespace) -> int:
    resolve_detector(args)
    data, split, parts = prepare(args)
    result = simulate(args, args.algorithm or default_algorithm(args.detector), data, split, parts)
    log.info("%s %s on %s: auc_roc=%.4f average_precision=%.4f f1=%.3f recall=%.3f false_positive_rate=%.4f "
             "seconds_per_round=%.5f", args.detector, result["algorithm"], result["dataset"], result["auc_roc"],
             result["average_precision"], result["f1"], result["recall"], result["false_positive_rate"],
             result["seconds_per_round"])
    spread = result.get("device_false_positive_rate")
    if spread:
        log.info("devices' false-positive rates: min %.4f median %.4f max %.4f (%d above 3 %%; the median device saw "
                 "%d normal test records)", spread["min"], spread["median"], spread["max"], spread["above_3_percent"],
                 spread["normal_records_median"])
    write_json(result, args.json)
    return 0


def default_algorithm(detector: str) -> str:
    return "fedem" if detector == "gmm" else "fedpg"


def run_robustness(args: argparse.Namespace) -> int:
    from fedsentry.bench import robustness

    defaults = argparse.ArgumentParser(add_help=False)  # what `simulate pca` takes when given no flags
    for add in (add_data_args, add_federation_args, add_pca_args, add_kernel_args):
        add(defaults)
    return robustness.run(args, defaults.parse_args([]))


def run_bench(args: argparse.Namespace) -> int:
    from fedsentry.bench.pca import bench

    resolve_detector(args)
    data, split, parts = prepare(args)
    write_json(bench(args, data, split, parts), args.json)
    return 0
