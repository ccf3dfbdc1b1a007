"""`fedsentry bench fleet`, `ingest` and `api` (bench pca / recsys sit with their simulate commands)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from fedsentry.bench import agent_memory, api, detection, fleet, ingest, rounds, scale, secagg
from fedsentry.cli.common import positive_float, positive_int, share
from fedsentry.errors import UsageError
from models.families import DEFAULT_DETECTOR, DETECTORS


def register(groups: dict[str, Any], verbs: Any) -> None:
    register_fleet(groups)
    register_ingest(groups)
    register_api(groups)
    register_rounds(groups)
    register_agent_memory(groups)
    register_detection(groups)
    register_secagg(groups)
    register_scale(groups)


def register_scale(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("scale", help="what a fleet of N devices costs, per family: round message and "
                                   "upload bytes, server step per round, rounds/s and upload messages/s, alert rows/s, "
                                   "memory (sampled devices run for real, the rest extrapolated)")
    p.add_argument("--devices", type=positive_int, nargs="+", default=[100_000, 1_000_000],
                   help="fleet sizes N (default 100000 1000000)")
    p.add_argument("--sample", type=positive_int, default=20,
                   help="devices that run for real per family, at least 2 (default 20)")
    p.add_argument("--repeats", type=positive_int, default=5,
                   help="timed rounds of all the sample and of one device, each; the fastest counts (default 5)")
    p.add_argument("--rounds", type=positive_int, help="training rounds of the sample's jobs (default: each job's own, "
                   "30); the round costs do not depend on it")
    p.add_argument("--alerts", type=positive_int, default=20_000, help="alerts stored to time the ingest (default "
                   "20000)")
    p.add_argument("--alerts-per-device-hour", type=positive_float, default=10.0,
                   help="alerts a device sends per hour, for the rate a fleet needs (default 10: 10^7/h at 10^6)")
    p.add_argument("--db", metavar="URL", help="a PostgreSQL server: a scratch database is created there and "
                   "dropped afterwards (default: SQLite in a temporary folder)")
    p.add_argument("--data-dir", help="where named datasets live (nsl-kdd is used when present, synthetic otherwise)")
    p.add_argument("--out", default="benchmarks/results",
                   help="folder for scale.md, scale-postgresql.md with --db (default benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=scale.run)


def register_secagg(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("secagg", help="what private mode's secure aggregation costs one round: device "
                                   "CPU and bytes, coordinator CPU, with dropouts")
    p.add_argument("--devices", type=positive_int, nargs="+", default=[10, 100], help="devices per round "
                   "(default 10 100)")
    p.add_argument("--values", type=positive_int, default=35_328, help="values per upload (default 35328: a gmm "
                   "upload, 128 components of 22 features)")
    p.add_argument("--dropout", type=share, default=1 / 3, help="share of the devices that drop before uploading, "
                   "below 0.5 (default 1/3)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=secagg.run)


def register_detection(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("detection", help="the default detector as `simulate pca` runs it, on every "
                                   "dataset present, over partitions and seeds (the README's detection table)")
    p.add_argument("--datasets", nargs="+", choices=detection.NAMED, metavar="NAME",
                   help="named datasets (default: synthetic and each of nsl-kdd, ton-iot that is present)")
    p.add_argument("--partitions", nargs="+", choices=("iid", "noniid", "dirichlet"),
                   default=["iid", "noniid", "dirichlet"], help="partitions (default iid noniid dirichlet)")
    p.add_argument("--seeds", type=positive_int, default=5, help="seeds 0..N-1 per partition (default 5)")
    p.add_argument("--data-dir", help="where named datasets live")
    p.add_argument("--simulate", metavar="FLAGS", help="more `simulate pca` flags for every run, quoted (e.g. "
                   "--simulate '--min-support 6'): to compare a setting with the defaults; not with --readme")
    p.add_argument("--readme", metavar="PATH", help="rewrite the table between this README's "
                   "<!-- detection-table --> markers")
    p.add_argument("--out", default="benchmarks/results", help="folder for detection.md (default benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=run_detection)


def run_detection(args: argparse.Namespace) -> int:
    from fedsentry.cli import build_parser
    from fedsentry.cli.pca import COMMAND, resolve_detector
    from fedsentry.runs.params import default_algorithm

    def simulate_args(flags: list[str]) -> tuple[argparse.Namespace, str]:
        """`simulate pca` given these flags: its settings and the algorithm it runs."""
        argv = ["simulate", COMMAND, *flags]
        try:
            sim = build_parser(argv).parse_args(argv)
        except UsageError as e:  # what --simulate added: named, before any run
            raise UsageError(f"--simulate {args.simulate!r}: {e}") from None
        resolve_detector(sim)
        return sim, sim.algorithm or default_algorithm(sim.detector)

    if args.simulate:
        try:
            flags = shlex.split(args.simulate)
        except ValueError as e:
            raise UsageError(f"--simulate {args.simulate!r}: {e} (quote it as one argument)") from None
        simulate_args(flags)
    return detection.run(args, simulate_args)


def register_agent_memory(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("agent-memory", help="resident memory of one agent process through a training "
                                   "job with the default detector, and while it scores afterwards")
    p.add_argument("--records", type=positive_int, default=50_000, help="training records (default 50000)")
    p.add_argument("--memory-budget", metavar="MIB", help="give the agent this --memory-budget")
    p.add_argument("--detector", choices=DETECTORS, default=DEFAULT_DETECTOR,
                   help=f"the job's detector family (default {DEFAULT_DETECTOR})")
    p.add_argument("--data-dir", help="where named datasets live (nsl-kdd is used when present, synthetic otherwise)")
    p.add_argument("--out", default="benchmarks/results",
                   help="folder for agent-memory.md, or agent-memory-DETECTOR.md for another detector (default "
                   "benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=agent_memory.run)


def register_rounds(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("rounds", help="the coordinator's aggregation time per round as the federation "
                                   "grows")
    p.add_argument("--clients", type=positive_int, nargs="+", default=[1_000, 100_000, 1_000_000],
                   help="federation sizes (default 1000 100000 1000000)")
    p.add_argument("--sampled", type=positive_int, default=10, help="clients answering each round (default 10)")
    p.add_argument("--rounds", type=positive_int, default=20, help="rounds timed per size (default 20)")
    p.add_argument("--features", type=positive_int, default=20, help="number of features d (default 20)")
    p.add_argument("--rank", type=positive_int, default=3, help="subspace dimension (default 3)")
    p.add_argument("--mixture-features", type=positive_int, default=22,
                   help="features of the gmm rows (default 22, as ton-iot's Zeek flows)")
    p.add_argument("--components", type=positive_int, default=128, help="gmm components (default 128)")
    p.add_argument("--out", default="benchmarks/results", help="folder for rounds.md (default benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=rounds.run)


def register_fleet(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("fleet", help="round time with many agents on one broker; agent memory")
    p.add_argument("--agents", type=positive_int, default=100, help="agents sharing the broker (default 100)")
    p.add_argument("--rounds", type=positive_int, default=20, help="training rounds timed (default 20)")
    p.add_argument("--fraction", type=float, default=0.1, help="share of agents sampled per round (default 0.1)")
    p.add_argument("--algorithm", default="fedmm", help="pca algorithm of the job (default fedmm)")
    p.add_argument("--broker", help="use this broker (default: a private Mosquitto, else the embedded one)")
    p.add_argument("--db", help="database URL (default: SQLite in a temporary folder)")
    p.add_argument("--out", default="benchmarks/results",
                   help="folder for fleet-AGENTS.md (default benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=fleet.run)



def register_ingest(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("ingest", help="alerts stored per second by 1, 2, ... `coordinator --role "
                                   "ingest` workers reading RabbitMQ's quorum queue, and the ratio to one worker")
    p.add_argument("--queue", required=True, metavar="URL",
                   help="the RabbitMQ the workers read (amqp://user:password@host:5672/); its queue "
                        "fedsentry.alerts is emptied first")
    p.add_argument("--postgres", required=True, metavar="URL",
                   help="a PostgreSQL server: each worker count runs on a scratch database created there and "
                        "dropped afterwards (e.g. postgresql://postgres@127.0.0.1:5432/postgres)")
    p.add_argument("--workers", type=positive_int, nargs="+", default=[1, 2],
                   help="worker counts to time, the first 1 for the ratio (default 1 2)")
    p.add_argument("--alerts", type=positive_int, default=200_000, help="alerts per run (default 200000)")
    p.add_argument("--devices", type=positive_int, default=200, help="devices they come from (default 200)")
    p.add_argument("--per-message", type=positive_int, default=50, help="alerts per message (default 50)")
    p.add_argument("--out", default="benchmarks/results",
                   help="folder for ingest-workers.md (default benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=ingest.run)


def register_api(groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser("api", help="anomaly listing, counts, incidents and chart speed over many "
                                   "stored alerts")
    p.add_argument("--alerts", type=positive_int, default=100_000, help="alerts stored before timing (default 100000)")
    p.add_argument("--devices", type=positive_int, default=200, help="devices the alerts are spread over (default 200)")
    p.add_argument("--db", action="append", metavar="URL",
                   help="an empty database to fill and time, repeatable; `sqlite`: a file in a temporary folder "
                        "(default: that)")
    p.add_argument("--postgres", metavar="URL",
                   help="also time PostgreSQL, in a scratch database created on this URL's server and dropped "
                        "afterwards (e.g. postgresql://postgres@127.0.0.1:5432/postgres)")
    p.add_argument("--repeat", type=positive_int, default=10,
                   help="times each count, incident and chart request is repeated (default 10)")
    p.add_argument("--partitioned", action="store_true",
                   help="PostgreSQL only: partition each PostgreSQL database's alerts by day before loading (as "
                        "`fedsentry db partition-alerts`); SQLite stays one table")
    p.add_argument("--bulk", action="store_true",
                   help="PostgreSQL only: load the same alerts by COPY with the roll-up triggers off, then fill the "
                        "roll-ups from them (store.bulk), in chunks of bounded memory: for millions of alerts")
    p.add_argument("--reuse", action="store_true",
                   help="time the alerts an earlier run left in each --db (the same --alerts and --devices) instead "
                        "of storing them again (a --db that holds none is filled)")
    p.add_argument("--out", default="benchmarks/results", help="folder for api-listing.md (default benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")
    p.set_defaults(func=api.run)

