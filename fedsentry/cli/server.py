"""Server-side commands: `fedsentry coordinator`, `fedsentry job create` and `fedsentry demo`."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import Any

from fedsentry.cli.common import add_federation_args, positive_float, positive_int
from fedsentry.cli.pca import add_data_args, add_pca_args
from fedsentry.errors import UsageError
from fedsentry.output import write_json
from models.pca import FEDERATED
from models.recsys import FEDERATED as RECSYS


def register(groups: dict[str, Any], verbs: Any) -> None:
    c = verbs.add_parser("coordinator", help="run the coordinator (jobs, rounds, alerts)")
    add_service_args(c)
    c.set_defaults(func=run_coordinator)

    job = verbs.add_parser("job", help="manage training jobs").add_subparsers(dest="action", required=True)
    create = job.add_parser("create", help="create a PCA job; a running coordinator picks it up")
    create.add_argument("--db", help="database URL (default $FEDSENTRY_DB_URL or sqlite:///fedsentry.db)")
    create.add_argument("--id", help="job id (default: generated)")
    create.add_argument("--algorithm", choices=sorted(FEDERATED), default="fedmm")
    create.add_argument("--rank", type=positive_int, default=3)
    create.add_argument("--rounds", type=positive_int, default=30)
    create.add_argument("--fraction", type=float, default=0.3)
    create.add_argument("--seed", type=int, default=0)
    create.add_argument("--quantile", type=float, default=0.99)
    create.add_argument("--min-agents", type=positive_int, default=1, help="wait until this many agents are online")
    create.add_argument("--deadline", type=positive_float, default=10.0, help="seconds to wait for a round's uploads")
    create.add_argument("--features", required=True, help="comma-separated feature names the agents provide")
    create.set_defaults(func=run_job_create)

    demo = verbs.add_parser("demo", help="broker, coordinator and agents on one machine, end to end")
    add_data_args(demo)
    add_federation_args(demo, rounds=30)
    add_pca_args(demo)
    demo.set_defaults(fraction=0.3, rank=None, local_steps=None)
    demo.add_argument("--job", choices=("pca", "recsys"), default="pca", help="job type (default pca)")
    demo.add_argument("--agents", type=positive_int, default=10, help="agent processes (default 10)")
    demo.add_argument("--algorithm", choices=sorted(FEDERATED) + sorted(RECSYS),
                      help="default fedmm for pca, fedmc-admm for recsys")
    demo.add_argument("--regularizer", choices=("l2", "l1"), default="l2", help="recsys fedmc-admm: l2 or l1")
    demo.add_argument("--broker", help="use this broker instead of the embedded one")
    demo.add_argument("--db", help="database URL (default $FEDSENTRY_DB_URL or sqlite:///fedsentry.db)")
    demo.add_argument("--json", metavar="PATH", help="write the outcome as JSON (- for stdout)")
    demo.add_argument("--keep-serving", action="store_true", help="keep the broker and coordinator up afterwards")
    demo.set_defaults(func=run_demo)


def add_service_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker", default=os.environ.get("FEDSENTRY_BROKER_URL"),
                   help="mqtt://host:port (default $FEDSENTRY_BROKER_URL; the embedded broker when unset)")
    p.add_argument("--db", help="database URL (default $FEDSENTRY_DB_URL or sqlite:///fedsentry.db)")
    p.add_argument("--username", default=os.environ.get("FEDSENTRY_MQTT_USERNAME"),
                   help="broker username (default $FEDSENTRY_MQTT_USERNAME)")
    p.add_argument("--password", default=os.environ.get("FEDSENTRY_MQTT_PASSWORD"),
                   help="broker password (default $FEDSENTRY_MQTT_PASSWORD)")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--ca-cert")


def run_coordinator(args: argparse.Namespace) -> int:
    from coordinator.broker import EmbeddedBroker
    from coordinator.service import Coordinator

    broker = None
    url = args.broker
    if not url:
        broker = EmbeddedBroker().start()
        url = broker.url
        print(f"embedded MQTT broker on {url}", flush=True)
    try:
        coord = Coordinator(url, args.db, username=args.username, password=args.password, tls=args.tls,
                            ca_cert=args.ca_cert)
    except ValueError as e:
        raise UsageError(str(e)) from None
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    coord.start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        coord.close()
        if broker:
            broker.stop()
    return 0


def run_job_create(args: argparse.Namespace) -> int:
    import uuid

    from coordinator.db import Job, make_engine, migrate, session_factory
    from wire.protocol import check_id

    features = [f.strip() for f in args.features.split(",") if f.strip()]
    if len(features) < 2 or len(set(features)) != len(features):
        raise UsageError("--features needs at least two distinct comma-separated names")
    if args.rank >= len(features):
        raise UsageError(f"--rank {args.rank} must be smaller than the number of features ({len(features)})")
    if not 0 < args.fraction <= 1:
        raise UsageError("--fraction must be in (0, 1]")
    if not 0 < args.quantile < 1:
        raise UsageError("--quantile must be in (0, 1)")
    job_id = args.id or f"pca-{uuid.uuid4().hex[:8]}"
    try:
        check_id(job_id, "job id")
    except ValueError as e:
        raise UsageError(str(e)) from None
    engine = make_engine(args.db)
    migrate(engine)
    with session_factory(engine).begin() as s:
        if s.get(Job, job_id) is not None:
            raise UsageError(f"job {job_id!r} exists already")
        s.add(Job(id=job_id, type="pca", algorithm=args.algorithm, status="pending", params={
            "features": features, "rank": args.rank, "rounds": args.rounds, "fraction": args.fraction,
            "seed": args.seed, "quantile": args.quantile, "min_agents": args.min_agents, "deadline": args.deadline}))
    print(job_id)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from fedsentry.demo.pca import demo

    pca = args.job == "pca"
    args.algorithm = args.algorithm or ("fedmm" if pca else "fedmc-admm")
    if args.algorithm not in (FEDERATED if pca else RECSYS):
        raise UsageError(f"--algorithm {args.algorithm} is not a {args.job} algorithm; choose from "
                         f"{', '.join(sorted(FEDERATED if pca else RECSYS))}")
    args.rank = args.rank or (3 if pca else 10)
    if pca:
        args.local_steps = args.local_steps or 10
    result = demo(args)
    write_json(result, args.json)
    return 0
