"""`fedsentry simulate pca` and `fedsentry bench pca`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from fedsentry.cli.common import add_clients_arg, add_federation_args, non_negative_int, positive_float, share
from fedsentry.cli.simulate_flags import add_simulate_flags, check_simulated, family_of, refuse_others
from fedsentry.data import datasets
from fedsentry.errors import UsageError
from fedsentry.output import write_json
from fedsentry.runs.detection import prepare, simulate
from fedsentry.runs.params import default_algorithm
from models.detection.attacks import ATTACKS, PRIVATE_ATTACKS
from models.detection.robust import TRIM_CRITERIA
from models.families import detectors, simulated
from models.partition import PARTITIONS

log = logging.getLogger("fedsentry.pca")



#: the anomaly-detection families that have a simulator: `simulate pca` runs each (--detector) through its runner
#: (the registry's `simulator`)
DETECTION = [n for n in simulated("records") if n in detectors()]
#: `simulate pca` is the command's name from before the other detectors (README, docs): it runs every family of
#: DETECTION, the default detector unless told
COMMAND = "pca"


def register(groups: dict[str, Any], verbs: Any) -> None:
    sim = groups["simulate"].add_parser(COMMAND, help="federated anomaly detection (" + ", ".join(DETECTION) +
                                        "), in one process")
    add_data_args(sim)
    add_clients_arg(sim)
    add_pca_args(sim)
    sim.add_argument("--private-dropout", type=share, metavar="SHARE", help="gmm with --private: the share of "
                     "each round's devices that vanish after uploading (the secure sum still completes; at most 1/3)")
    sim.add_argument("--support-proofs", action="store_true", help="gmm with --private: each device proves its "
                     "support row holds 0s and 1s (Pedersen commitments and bit proofs, checked against each secure "
                     "sum: docs/privacy.md); needs PyNaCl (the private extra)")
    sim.add_argument("--select", action="store_true", help="gmm: choose the ridge without labels, the one whose "
                     "held-out records are likeliest (trains one mixture per candidate ridge: README)")
    sim.add_argument("--json", metavar="PATH", help="write the result as JSON (- for stdout)")
    sim.set_defaults(func=run_simulate)

    # bench pca is about one family: it compares every PCA algorithm (with the mixture and two baselines beside them)
    bench = groups["bench"].add_parser("pca", help="every PCA algorithm, the Gaussian mixture, IsolationForest and "
                                       "nearest-neighbour distance on one split")
    add_data_args(bench)
    add_clients_arg(bench)
    add_pca_args(bench, algorithm=False)
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
    add_federation_args(robust, rounds=60)
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
    g.add_argument("--attack", choices=(*ATTACKS, *PRIVATE_ATTACKS), help="what the adversaries do "
                   "(docs/robustness.md). compliant "
                   "(default): train honestly on their normal records plus 300 attack records of the three commonest "
                   "kinds and upload true statistics; inflate: the same records, claiming the most records the "
                   "statistics phase admits; max-variance: all of a device's variance on one direction, within the "
                   "checks; non-psd: second moments with a +1e4 off-diagonal entry, sums and diagonal consistent "
                   "(gmm, or pca with fedmm); threshold: every held-out error in the top histogram bin; random, "
                   "scaled, rotated (pca): the honest upload replaced by noise, x1000, or turned away from the "
                   "consensus; support-inflate (gmm --private): the compliant rogue's records, its support "
                   "row's change masked 5 times over; support-nonbit (gmm --private): the same records, its "
                   "support row's change masked twice over and committed to as is (with --support-proofs an entry "
                   "of -1 or 2 has no bit proof: refused at each sum where its row changes)")


def add_pca_args(p: argparse.ArgumentParser, *, algorithm: bool = True, job: bool = False) -> None:
    """The detector families' flags (generated from their specs: fedsentry/cli/simulate_flags.py), then the
    simulation's own: how records are split and trimmed."""
    add_simulate_flags(p, DETECTION, algorithm=algorithm, job=job)
    p.add_argument("--partition", choices=PARTITIONS, default="noniid", help="how records are split (default noniid)")
    p.add_argument("--partition-feature", help="noniid: feature to sort on (default: most distinct values)")
    p.add_argument("--alpha", type=positive_float, default=0.5, help="dirichlet: concentration (default 0.5)")
    p.add_argument("--trim", type=share, default=0.0,
                   help="leave this share of the most suspicious training records out of the statistics (default 0)")
    p.add_argument("--trim-by", choices=TRIM_CRITERIA, default="distance",
                   help="distance: federation-wide cut on distance from the mean (default); residual: each "
                   "client drops its worst-reconstructed share, re-evaluated as Z improves")


def resolve_detector(args: argparse.Namespace) -> None:
    """--detector as given, else the family whose simulator alone runs the --algorithm named (fedpg, local), else
    the default detector; then its settings checked by its spec."""
    args.detector = family_of(args, DETECTION)
    check_simulated(args, args.detector)


def run_simulate(args: argparse.Namespace) -> int:
    resolve_detector(args)
    refuse_others(args, args.detector, DETECTION)
    if args.support_proofs and (args.detector != "gmm" or not getattr(args, "private", False)):
        raise UsageError("--support-proofs proves private mode's support rows: add --detector gmm --private")
    data, split, parts = prepare(args)
    result = simulate(args, args.algorithm or default_algorithm(args.detector), data, split, parts)
    log.info("%s %s on %s: auc_roc=%.4f average_precision=%.4f f1=%.3f recall=%.3f false_positive_rate=%.4f "
             "seconds_per_round=%.5f", args.detector, result["algorithm"], result["dataset"], result["auc_roc"],
             result["average_precision"], result["f1"], result["recall"], result["false_positive_rate"],
             result["seconds_per_round"])
    spread = result.get("device_false_positive_rate")
    if spread:
        log.info("devices' false-positive rates: min %.4f median %.4f max %.4f (%d above 3 %%, %.1f expected by chance "
                 "at the fleet's rate, %d shown above 3 %% by a binomial test; the median device saw %d normal test "
                 "records)", spread["min"], spread["median"], spread["max"], spread["above_3_percent"],
                 spread["above_3_percent_by_chance"], spread["significantly_above_3_percent"],
                 spread["normal_records_median"])
    write_json(result, args.json)
    return 0


def run_robustness(args: argparse.Namespace) -> int:
    from fedsentry.bench import robustness

    defaults = argparse.ArgumentParser(add_help=False)  # what `simulate pca` takes when given no flags
    for add in (add_data_args, add_clients_arg, add_pca_args):
        add(defaults)
    return robustness.run(args, defaults.parse_args([]))


def run_bench(args: argparse.Namespace) -> int:
    from fedsentry.bench.pca import bench

    resolve_detector(args)
    data, split, parts = prepare(args)
    write_json(bench(args, data, split, parts), args.json)
    return 0
