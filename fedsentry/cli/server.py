"""Server-side commands: `fedsentry coordinator`, `fedsentry job create` and `fedsentry demo`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fedsentry.cli.common import (
    DB_HELP,
    add_credential_args,
    broker_password,
    positive_int,
    utc_time,
)
from fedsentry.cli.job_flags import add_job_flags, flag_of, job_values
from fedsentry.cli.pca import COMMAND as DETECTION_COMMAND
from fedsentry.cli.pca import add_data_args, add_pca_args, resolve_detector
from fedsentry.errors import Terminated, UsageError
from fedsentry.output import write_json
from models.families import FAMILIES, families_with, family, spec_default

if TYPE_CHECKING:
    from coordinator.broker import EmbeddedBroker
    from store.db import Job, Round

JOB_STATUSES = ("pending", "running", "finished", "failed", "cancelled")


def register(groups: dict[str, Any], verbs: Any) -> None:
    c = verbs.add_parser("coordinator", help="run the coordinator (jobs, rounds, alerts)")
    add_service_args(c)
    c.add_argument("--role", choices=("all", "driver", "ingest"), default=os.environ.get("FEDSENTRY_ROLE", "all"),
                   help="what this process does: driver (lead jobs: rounds, answers, promoted models), ingest (store "
                        "alerts, forward them, retention) or all (default $FEDSENTRY_ROLE, else all). Several "
                        "processes of each role may share one PostgreSQL database (README: Several coordinators)")
    c.add_argument("--queue", action="append", metavar="URL",
                   default=os.environ.get("FEDSENTRY_QUEUE_URLS", "").split() or None,
                   help="on RabbitMQ: ingest workers read alerts, statuses and the answers to rounds from quorum "
                        "queues on amq.topic at this AMQP URL (amqp://user:password@host:5672/; repeat for the "
                        "cluster's nodes, tried in turn; default the space-separated URLs of $FEDSENTRY_QUEUE_URLS, "
                        "which keeps their passwords out of the process list) instead of subscribing to them, and "
                        "store the answers for the drivers; a driver given it takes the answers from the database")
    c.add_argument("--ingest-workers", type=positive_int, default=1, metavar="N",
                   help="how many ingest processes share the alerts: each admits 1/N of a device's alert rate "
                        "(default 1)")
    c.add_argument("--client-id", default=os.environ.get("FEDSENTRY_CLIENT_ID", "fedsentry-coordinator"),
                   help="MQTT client id; each coordinator on a broker needs its own (default $FEDSENTRY_CLIENT_ID, "
                        "else fedsentry-coordinator)")
    c.set_defaults(func=run_coordinator)

    job = verbs.add_parser("job", help="manage training jobs").add_subparsers(dest="action", required=True)
    create = job.add_parser("create", help="create a job (the API's settings); a running coordinator picks it up")
    create.add_argument("--db", help=DB_HELP)
    create.add_argument("--id", help="job id (default: generated)")
    add_job_flags(create)  # one per setting of every registered family (their typed specs)
    create.set_defaults(func=run_job_create)

    ls = job.add_parser("list", help="jobs, newest first")
    ls.add_argument("--db", help=DB_HELP)
    ls.add_argument("--status", choices=JOB_STATUSES, help="only jobs in this state")
    ls.add_argument("--since", type=utc_time, help="only jobs created at or after this ISO 8601 time, e.g. "
                    "2026-11-23T10:00:00+01:00 (no offset: UTC)")
    ls.add_argument("--until", type=utc_time, help="only jobs created before this ISO 8601 time (no offset: UTC)")
    ls.add_argument("--limit", type=positive_int, default=50, help="at most this many jobs (default 50)")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=run_job_list)
    show = job.add_parser("show", help="one job: settings, state and its rounds")
    show.add_argument("id", help="the job's id (see `fedsentry job list`)")
    show.add_argument("--db", help=DB_HELP)
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(func=run_job_show)
    cancel = job.add_parser("cancel", help="cancel a pending or running job; its coordinator stops it")
    cancel.add_argument("id", help="the job's id (see `fedsentry job list`)")
    cancel.add_argument("--db", help=DB_HELP)
    cancel.add_argument("--json", action="store_true", help="print the cancelled job as JSON")
    cancel.set_defaults(func=run_job_cancel)

    demo = verbs.add_parser("demo", help="broker, coordinator and agents on one machine, end to end")
    add_data_args(demo)
    add_pca_args(demo, algorithm=False, job=True)  # a real job: the job's defaults (30 rounds, 30 % per round)
    demo.set_defaults(rank=None)
    demo.add_argument("--job", choices=(DETECTION_COMMAND, *families_with("ratings")), default=DETECTION_COMMAND,
                      help=f"{DETECTION_COMMAND}: anomaly detection (the detector is --detector); "
                      + "; ".join(f"{n}: {family(n).summary}" for n in families_with("ratings"))
                      + f" (default {DETECTION_COMMAND})")
    demo.add_argument("--agents", type=positive_int, help="agent processes, one per client (default 10)")
    demo.add_argument("--clients", type=positive_int, help="the same as --agents (as simulate names them); "
                      "given with a different --agents, an error")
    demo.add_argument("--algorithm", choices=sorted({a for f in FAMILIES.values() for a in f.algorithms}),
                      help="the job's algorithm (default the family's: " + ", ".join(
                          f"{f.spec.default_algorithm()} for {n}" for n, f in FAMILIES.items()) + ")")
    demo.add_argument("--regularizer", choices=("l2", "l1"), help="recsys fedmc-admm: l2 or l1 (default l2)")
    demo.add_argument("--broker", help="use this broker instead of the embedded one")
    demo.add_argument("--db", help=DB_HELP)
    demo.add_argument("--json", metavar="PATH", help="write the outcome as JSON (- for stdout)")
    demo.add_argument("--keep-serving", action="store_true",
                      help="afterwards keep the broker, coordinator, dashboard and agents up (online for new jobs) "
                      "until Ctrl-C or SIGTERM; keeps the work folder")
    demo.add_argument("--keep-work", action="store_true",
                      help="keep the temporary work folder (agents' data, logs, state), removed at the end otherwise "
                      "(also on Ctrl-C or SIGTERM)")
    demo.add_argument("--host", default="127.0.0.1", help="address the dashboard listens on (default 127.0.0.1)")
    demo.add_argument("--port", type=positive_int,
                      help="port of the dashboard (default 8000, or a free port when 8000 is taken)")
    demo.set_defaults(func=run_demo)


def add_service_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker", default=os.environ.get("FEDSENTRY_BROKER_URL"),
                   help="mqtt://host:port (default $FEDSENTRY_BROKER_URL; the embedded broker when unset)")
    p.add_argument("--db", help="database URL (default $FEDSENTRY_DB_URL or sqlite:///fedsentry.db)")
    add_credential_args(p, "broker username (default $FEDSENTRY_MQTT_USERNAME)")
    p.add_argument("--tls", action="store_true", help="connect to the broker with TLS")
    p.add_argument("--ca-cert", help="CA certificate for the broker's TLS (implies --tls)")
    p.add_argument("--enrol", action="append", default=[], metavar="ID",
                   help="with the embedded broker (no --broker): a device that may connect (repeatable); its "
                        "password is written to a file only you can read, named at start")
    p.add_argument("--state-dir", default=os.environ.get("FEDSENTRY_STATE_DIR", "fedsentry-server"),
                   help="with the embedded broker: where its port and passwords are kept (0600 files), so that a "
                        "restart keeps them and agents reconnect by themselves (default $FEDSENTRY_STATE_DIR, "
                        "else ./fedsentry-server)")
    add_forward_args(p)


def add_forward_args(p: argparse.ArgumentParser) -> None:
    """Alert forwarding (coordinator/forward.py): flags, each with an environment default."""
    g = p.add_argument_group("forwarding alerts to a SOC (README: Forwarding alerts)")
    g.add_argument("--forward-webhook", action="append", metavar="URL",
                   help="POST every stored alert as JSON to this http(s) URL (repeatable; default the "
                        "space-separated URLs of $FEDSENTRY_FORWARD_WEBHOOK)")
    g.add_argument("--forward-ecs-webhook", action="append", metavar="URL",
                   help="POST every stored alert as an Elastic Common Schema document to this http(s) URL "
                        "(repeatable; default the space-separated URLs of $FEDSENTRY_FORWARD_ECS_WEBHOOK)")
    g.add_argument("--forward-ecs-file", action="append", metavar="PATH",
                   help="append every stored alert as an ECS document, one JSON line each, to this file for "
                        "Filebeat or Vector (repeatable; reopened when rotated; default the space-separated paths "
                        "of $FEDSENTRY_FORWARD_ECS_FILE)")
    g.add_argument("--forward-webhook-header-file", metavar="F",
                   help="headers for the webhooks (ECS ones too), one 'Name: value' a line, e.g. "
                        "'Authorization: Bearer ...' "
                        "(default $FEDSENTRY_FORWARD_WEBHOOK_HEADER_FILE, else the lines of "
                        "$FEDSENTRY_FORWARD_WEBHOOK_HEADERS; never on the command line)")
    g.add_argument("--forward-syslog", action="append", metavar="udp://HOST:PORT|tcp://HOST:PORT",
                   help="send every stored alert as an RFC 5424 message to this syslog server (repeatable; TCP "
                        "octet-counted; port 514 by default; ?max_size=BYTES: the longest message, default 2048 "
                        "over UDP, 8192 over TCP; default the space-separated URLs of $FEDSENTRY_FORWARD_SYSLOG)")
    g.add_argument("--forward-syslog-facility", metavar="NAME",
                   help="syslog facility, a name (local0..local7, daemon, ...) or 0-23 (default "
                        "$FEDSENTRY_FORWARD_SYSLOG_FACILITY or local0)")
    g.add_argument("--forward-syslog-severity", metavar="NAME",
                   help="syslog severity, a name (emerg .. debug) or 0-7 (default $FEDSENTRY_FORWARD_SYSLOG_SEVERITY "
                        "or warning)")


def _flag_or_env(args: argparse.Namespace, name: str, env: str) -> tuple[list[str], str]:
    """The values of a repeatable flag, else of its environment variable (space-separated), with the name
    to put in an error message."""
    given = getattr(args, name)
    flag = "--" + name.replace("_", "-")
    if given:
        return list(given), flag
    return os.environ.get(env, "").split(), f"${env} ({flag})"


def forward_destinations(args: argparse.Namespace) -> list[Any]:
    """The destinations of add_forward_args; UsageError naming the flag (or variable) of a bad value."""
    from coordinator import syslog
    from coordinator.forward import Webhook, parse_headers
    from coordinator.forward_ecs import EcsFile, EcsWebhook
    from coordinator.forward_syslog import Syslog

    webhooks, webhook_flag = _flag_or_env(args, "forward_webhook", "FEDSENTRY_FORWARD_WEBHOOK")
    ecs_hooks, ecs_hook_flag = _flag_or_env(args, "forward_ecs_webhook", "FEDSENTRY_FORWARD_ECS_WEBHOOK")
    ecs_files, ecs_file_flag = _flag_or_env(args, "forward_ecs_file", "FEDSENTRY_FORWARD_ECS_FILE")
    syslogs, syslog_flag = _flag_or_env(args, "forward_syslog", "FEDSENTRY_FORWARD_SYSLOG")
    headers: list[tuple[str, str]] = []
    path = args.forward_webhook_header_file or os.environ.get("FEDSENTRY_FORWARD_WEBHOOK_HEADER_FILE")
    try:
        if path:
            try:
                with open(path) as f:
                    headers = parse_headers(f.read(), f"--forward-webhook-header-file {path}")
            except OSError as e:
                raise ValueError(f"--forward-webhook-header-file: cannot read {path}: {e.strerror}") from None
        elif os.environ.get("FEDSENTRY_FORWARD_WEBHOOK_HEADERS"):
            headers = parse_headers(os.environ["FEDSENTRY_FORWARD_WEBHOOK_HEADERS"],
                                    "$FEDSENTRY_FORWARD_WEBHOOK_HEADERS")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if headers and not (webhooks or ecs_hooks):
        raise UsageError("webhook headers are given but no --forward-webhook or --forward-ecs-webhook URL")
    levels = {}
    for what, names, default in (("facility", syslog.FACILITIES, "local0"), ("severity", syslog.SEVERITIES, "warning")):
        flag = f"--forward-syslog-{what}"
        text = getattr(args, f"forward_syslog_{what}") or os.environ.get(f"FEDSENTRY_FORWARD_SYSLOG_{what.upper()}")
        try:
            levels[what] = syslog.level(text or default, names, what)
        except ValueError as e:
            raise UsageError(f"{flag}: {e}") from None
    out: list[Any] = []
    for cls, values, flag in ((Webhook, webhooks, webhook_flag), (EcsWebhook, ecs_hooks, ecs_hook_flag)):
        for url in values:
            try:
                out.append(cls(url, headers))
            except ValueError as e:
                raise UsageError(f"{flag}: {e}") from None
    for path in ecs_files:
        try:
            out.append(EcsFile(path))
        except ValueError as e:
            raise UsageError(f"{ecs_file_flag}: {e}") from None
    for url in syslogs:
        try:
            out.append(Syslog(url, levels["facility"], levels["severity"]))
        except ValueError as e:
            raise UsageError(f"{syslog_flag}: {e}") from None
    return out


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def service_broker(args: argparse.Namespace) -> tuple[EmbeddedBroker | None, str, str | None, str | None]:
    """The broker of `coordinator` and `serve`: --broker with its credentials, or the embedded one (its
    own per-run credentials, and the --enrol devices') when no --broker is given."""
    import sys

    from coordinator.broker import EmbeddedBroker
    from wire.mqtt import redact_url

    if args.broker:
        if args.enrol:
            raise UsageError("--enrol is for the embedded broker: enrol devices on yours with deploy/enrol-device.sh")
        return None, args.broker, args.username, broker_password(args)
    try:
        broker = EmbeddedBroker(devices=args.enrol, state_dir=args.state_dir)
    except ValueError as e:
        raise UsageError(f"--enrol: {e}") from None
    except OSError as e:
        raise UsageError(f"--state-dir {args.state_dir}: {e.strerror or e}") from None
    if not port_free("127.0.0.1", broker.port):
        raise UsageError(f"the embedded broker's port {broker.port} (kept in {args.state_dir}/broker.json so that "
                         "agents reconnect after a restart) is in use: is another fedsentry serve or coordinator "
                         f"running on {args.state_dir}? Stop it, or give another --state-dir")
    broker.start()
    print(f"embedded MQTT broker on {redact_url(broker.url)}", file=sys.stderr, flush=True)
    for d in args.enrol:
        print(f"  device {d}: fedsentry agent --broker {broker.url} --id {d} --mqtt-password-file "
              f"{broker.password_file(d)}", file=sys.stderr, flush=True)
    return broker, broker.url, broker.username, broker.password


def run_coordinator(args: argparse.Namespace) -> int:
    from coordinator.service import Coordinator

    forward = forward_destinations(args)
    broker, url, username, password = service_broker(args)
    try:
        if args.role not in ("all", "driver", "ingest"):  # from $FEDSENTRY_ROLE (argparse checks the flag)
            raise ValueError(f"$FEDSENTRY_ROLE: {args.role!r} is not one of all, driver, ingest")
        roles = ("driver", "ingest") if args.role == "all" else (args.role,)
        coord = Coordinator(url, args.db, client_id=args.client_id,
                            username=username, password=password, tls=args.tls, ca_cert=args.ca_cert,
                            forward=forward, roles=roles, queue_urls=args.queue, ingest_workers=args.ingest_workers)
    except ValueError as e:
        if broker:
            broker.stop()
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

    from models.families import family_for, job_spec
    from models.params import SettingError
    from store.db import make_engine, migrate, session_factory
    from store.jobs import JobExistsError, JobLimitError, create_job
    from wire.protocol import check_id

    values = job_values(args)
    args.type = family_for(args.type, args.algorithm)
    try:
        spec = job_spec(args.type, {k: v for k, v in values.items() if v is not None})
    except SettingError as e:
        raise UsageError(f"{flag_of(e.field)}: {e.problem}") from None
    job_id = args.id or f"{args.type}-{uuid.uuid4().hex[:8]}"
    try:
        check_id(job_id, "job id")
    except ValueError as e:
        raise UsageError(str(e)) from None
    engine = make_engine(args.db)
    migrate(engine)
    try:
        create_job(session_factory(engine), job_id, spec)
    except (JobExistsError, JobLimitError) as e:
        raise UsageError(str(e)) from None
    print(job_id)
    return 0


def _job_sessions(db: str | None):
    from store.db import make_engine, migrate, session_factory

    engine = make_engine(db)
    migrate(engine)
    return session_factory(engine)


def _utc(t: Any) -> str | None:
    return None if t is None else t.isoformat(timespec="seconds") + "+00:00"  # stored as naive UTC


def _job_dict(job: Job, rounds: list[Round] | None = None) -> dict[str, Any]:
    out = {"id": job.id, "type": job.type, "algorithm": job.algorithm, "status": job.status, "phase": job.phase,
           "current_round": job.current_round, "error": job.error, "created": _utc(job.created),
           "updated": _utc(job.updated), "params": job.params}
    if rounds is not None:
        from store.round_record import answered_count, asked_count

        out["rounds"] = [{"round": r.round, "phase": r.phase, "sampled": asked_count(r),
                          "answered": answered_count(r), "seconds": r.seconds, "metrics": r.metrics or {}}
                         for r in rounds]
    return out


def _print_json(value: Any) -> None:
    import json

    print(json.dumps(value, indent=2, default=str))


def _job_table(jobs: list[dict[str, Any]]) -> str:
    from fedsentry.output import table

    return table(["ID", "TYPE", "ALGORITHM", "STATUS", "PHASE", "ROUND", "CREATED (UTC)"],
                 [[j["id"], j["type"], j["algorithm"], j["status"], j["phase"], j["current_round"],
                   j["created"][:19].replace("T", " ")] for j in jobs])


def run_job_list(args: argparse.Namespace) -> int:
    from store.jobs import list_jobs

    if args.since and args.until and args.since >= args.until:
        raise UsageError("--since must be before --until")
    with _job_sessions(args.db)() as s:
        jobs = [_job_dict(j) for j in list_jobs(s, args.status, args.since, args.until, args.limit)]
    if args.json:
        _print_json(jobs)
    elif jobs:
        print(_job_table(jobs))
    else:
        print("no jobs", file=sys.stderr)
    return 0


def run_job_show(args: argparse.Namespace) -> int:
    from store.jobs import JobNotFoundError, get_job, influence, job_rounds

    with _job_sessions(args.db)() as s:
        try:
            rounds = job_rounds(s, args.id)
            job = {**_job_dict(get_job(s, args.id), rounds), "influence": influence(rounds)}
        except JobNotFoundError as e:
            raise UsageError(f"{e} (see `fedsentry job list`)") from None
    if args.json:
        _print_json(job)
        return 0
    from fedsentry.output import table

    print(_job_table([job]))
    if job["error"]:
        print(f"error: {job['error']}")
    print("settings: " + ", ".join(f"{k}={_short(v)}" for k, v in sorted((job["params"] or {}).items())))
    if job["rounds"]:
        print(table(["ROUND", "PHASE", "SAMPLED", "ANSWERED", "SECONDS", "METRICS"],
                    [[r["round"], r["phase"], r["sampled"], r["answered"], f"{r['seconds']:.2f}",
                      " ".join(f"{k}={_short(v)}" for k, v in sorted(r["metrics"].items()) if k != "influence")]
                     for r in job["rounds"]]))
    else:
        print("no rounds yet")
    if job["influence"]:
        print("devices refused, capped or kept out of the shared model (FLAGGED: repeatedly):")
        print(table(["DEVICE", "REFUSED", "CAPPED", "KEPT OUT", "ANSWERED", "FLAGGED", "LATEST REASON"],
                    [[d["device"], d["refused"], d["capped"], d["kept_out"], d["rounds_answered"],
                      "yes" if d["flagged"] else "", "; ".join(d["reasons"].values())] for d in job["influence"]]))
    return 0


def _short(v: Any) -> str:
    """A setting or metric for one line: floats to 4 significant digits, long lists by their length."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return f"[{len(v)} values]" if len(v) > 8 else "[" + ",".join(map(_short, v)) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_short(x)}" for k, x in v.items()) + "}"
    return str(v)


def run_job_cancel(args: argparse.Namespace) -> int:
    from store.jobs import JobNotFoundError, JobStateError, cancel_job

    with _job_sessions(args.db).begin() as s:
        try:
            job = _job_dict(cancel_job(s, args.id))
        except JobNotFoundError as e:
            raise UsageError(f"{e} (see `fedsentry job list`)") from None
        except JobStateError as e:
            raise UsageError(str(e)) from None
    if args.json:
        _print_json(job)
    else:
        print(f"cancelled {args.id}; a running job stops at its coordinator's next poll", file=sys.stderr)
    return 0










def run_demo(args: argparse.Namespace) -> int:
    from fedsentry.demo.pca import demo

    if args.agents and args.clients and args.agents != args.clients:
        raise UsageError(f"--clients {args.clients} and --agents {args.agents} disagree: the demo runs one agent per "
                         "client; give one of them")
    args.agents = args.agents or args.clients or 10
    if args.port is not None and args.port > 65535:
        raise UsageError(f"--port {args.port}: a port is at most 65535")
    resolve_detector(args)
    kind = args.detector if args.job == DETECTION_COMMAND else args.job
    spec = family(kind).spec
    args.algorithm = args.algorithm or spec.default_algorithm()
    if args.algorithm not in spec.algorithms:
        raise UsageError(f"--algorithm {args.algorithm} is not a {kind} algorithm; choose from "
                         f"{', '.join(sorted(spec.algorithms))}")
    args.rank = args.rank or spec_default(kind, "rank")
    with sigterm_interrupts():
        result = demo(args)
    write_json(result, args.json)
    return 0


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside, `kill PID` stops the command as Ctrl-C does, through the same clean-up (the demo stops its agents
    and removes its work folder): SIGTERM raises Terminated in the main thread. A second one ends it at once."""

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
