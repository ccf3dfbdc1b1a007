"""`fedsentry agent`: the edge agent (base install: numpy and paho-mqtt only)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from fedsentry.cli.common import (
    add_credential_args,
    add_rating_columns,
    broker_password,
    positive_float,
    positive_int,
)
from fedsentry.errors import UsageError

if TYPE_CHECKING:
    pass


def register(groups: dict[str, Any], verbs: Any) -> None:
    p = verbs.add_parser("agent", help="run an edge agent")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--broker", default=os.environ.get("FEDSENTRY_BROKER_URL"),
                       help="mqtt://host:port or mqtts://host:port (default $FEDSENTRY_BROKER_URL)")
    where.add_argument("--broker-file", metavar="F",
                       help="read the broker URL from this file, e.g. fedsentry-server/broker.url, which `fedsentry "
                       "serve` writes for its embedded broker (its port is chosen once and kept in --state-dir)")
    p.add_argument("--id", default=os.environ.get("FEDSENTRY_AGENT_ID"),
                   help="this device's id (letters, digits, . _ -; default $FEDSENTRY_AGENT_ID)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--csv", metavar="F", help="replay this CSV of records")
    src.add_argument("--zeek", metavar="PATH", help="follow a Zeek conn.log (TSV or JSON) as it grows")
    src.add_argument("--stdin", action="store_true", help="read JSON records, one per line, from stdin")
    p.add_argument("--rate", type=positive_float, help="--csv: records per second (default: as fast as possible)")
    p.add_argument("--train", metavar="F", help="normal traffic to learn from, loaded once: a CSV or a Zeek log "
                   "(TSV or JSON)")
    p.add_argument("--ratings", metavar="F", help="a ratings shard (CSV): take part in recommendation jobs")
    p.add_argument("--test-ratings", metavar="F", help="held-out ratings of the same users (evaluation)")
    add_rating_columns(p)
    p.add_argument("--label-column", help="evaluation only: a label column in --csv, never used by the model")
    p.add_argument("--state-dir", help="where the agent keeps its state (default ./fedsentry-agent-ID)")
    add_credential_args(p, "broker username (default $FEDSENTRY_MQTT_USERNAME, else the id when a password is set)")
    p.add_argument("--tls", action="store_true", help="connect with TLS")
    p.add_argument("--ca-cert", default=os.environ.get("FEDSENTRY_CA_CERT"),
                   help="CA certificate for TLS (default $FEDSENTRY_CA_CERT; implies --tls)")
    p.add_argument("--cert", help="client certificate for TLS")
    p.add_argument("--key", help="client key for TLS")
    p.add_argument("--model-job", help="only score with models promoted by this job")
    p.add_argument("--wait-for-model", action="store_true", help="hold the traffic until a model is there")
    p.add_argument("--exit-after-replay", action="store_true",
                   help="exit when the input is done and the coordinator has confirmed every alert")
    p.add_argument("--scores-out", metavar="F", help="evaluation only: append every record's score, label (nan "
                   "when the input has none) and the threshold it was scored at here, as CSV")
    learn = p.add_mutually_exclusive_group()
    learn.add_argument("--learn", dest="learn", action="store_true", default=None,
                       help="keep a reservoir sample (50,000 records) of the traffic read as training records for "
                       "jobs (default with --zeek)")
    learn.add_argument("--no-learn", dest="learn", action="store_false",
                       help="train only on --train records, even with --zeek")
    p.add_argument("--calibrate", action="store_true", help="per-device threshold: this device's own quantile of "
                   "the scores of a held-out fifth of its training records, within a factor 2 of the federation's")
    p.add_argument("--memory-budget", type=float, metavar="MIB", default=_env_float("FEDSENTRY_MEMORY_BUDGET"),
                   help="resident memory (MiB) the agent may use through a training job: its training buffer is "
                   "sized to fit (default $FEDSENTRY_MEMORY_BUDGET, else 50,000 records; the systemd unit gives "
                   "100 under its MemoryMax=120M)")
    p.add_argument("--alert-burst", type=positive_int, default=20,
                   help="individual alerts per window; past them flagged records are counted in incidents")
    p.add_argument("--alert-window", type=positive_float, default=60.0, help="rate-limit window in seconds")
    p.add_argument("--feedback-training", action="store_true",
                   help="consent: flagged records analysts mark as false positives join the training buffer as "
                   "normal records (default off: they only raise this device's threshold, within its cap)")
    p.set_defaults(func=run_agent)


def _env_float(name: str) -> float | None:
    value = os.environ.get(name)
    try:
        return float(value) if value else None
    except ValueError:
        raise UsageError(f"${name}={value!r} is not a number") from None


def private_folder(path: str) -> None:
    """The agent's state folder (its training records, model, alerts) is for its own user only."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    mode = os.stat(path).st_mode & 0o777
    if mode & 0o077:
        logging.getLogger("fedsentry").warning("state folder %s was open to other users (mode %o): set to 0700",
                                               path, mode)
        os.chmod(path, 0o700)


def broker_from_file(path: str) -> str:
    """The broker URL in a --broker-file: its first line."""
    try:
        with open(path) as f:
            url = f.readline().strip()
    except OSError as e:
        raise UsageError(f"--broker-file {path}: cannot read it: {e.strerror or e} (`fedsentry serve` writes "
                         "broker.url in its --state-dir, default ./fedsentry-server, once its broker runs)") from None
    if not url:
        raise UsageError(f"--broker-file {path}: empty; it should hold a URL such as mqtt://127.0.0.1:1883")
    return url


def run_agent(args: argparse.Namespace) -> int:
    from edge_agent.agent import Agent, AgentConfig, training_source
    from edge_agent.memory import MIN_BUDGET, settle_allocator
    from edge_agent.sources import Replay, SchemaError, Source, ZeekFollower, csv_source, json_lines
    from edge_agent.store import AgentStore
    from wire.mqtt import parse_broker_url, redact_url
    from wire.protocol import check_id

    settle_allocator()  # this process is an agent: chunk temporaries go back to the system when freed
    if args.broker_file:
        args.broker = broker_from_file(args.broker_file)
    if not args.broker:
        raise UsageError("no broker: give --broker mqtt://host:port or set FEDSENTRY_BROKER_URL")
    if not args.id:
        raise UsageError("no agent id: give --id or set FEDSENTRY_AGENT_ID")
    try:
        check_id(args.id, "agent id")
        broker = parse_broker_url(args.broker)
    except ValueError as e:
        raise UsageError(str(e)) from None
    password = broker_password(args)
    if password and not (args.username or broker.username):
        args.username = args.id
    for f in (args.csv, args.train, args.ratings, args.test_ratings, args.ca_cert, args.cert, args.key):
        if f and not os.path.isfile(f):
            raise UsageError(f"file not found: {f}")
    state_dir = args.state_dir or f"fedsentry-agent-{args.id}"
    private_folder(state_dir)
    source: Source | None
    if args.csv:
        source = Replay(csv_source(args.csv, args.rate, label_column=args.label_column))
    elif args.zeek:
        try:
            source = ZeekFollower(args.zeek, AgentStore(state_dir).load_json("zeek", None))
        except OSError as e:  # not a regular file (NotRegularFileError), or not readable
            raise UsageError(f"--zeek {args.zeek}: {e}") from None
    elif args.stdin:
        source = Replay(json_lines(iter(sys.stdin.readline, "")))
    else:
        source = None
    if args.memory_budget is not None and not MIN_BUDGET <= args.memory_budget <= 1e6:
        raise UsageError(f"--memory-budget {args.memory_budget:g}: an agent needs at least {MIN_BUDGET} MiB through "
                         "a training job (interpreter, numpy, MQTT and a round's arithmetic; README)")
    cfg = AgentConfig(args.id, args.broker, state_dir, args.username, password, args.tls, args.ca_cert,
                      args.cert, args.key, args.model_job, args.wait_for_model, args.exit_after_replay,
                      args.scores_out, args.calibrate, bool(args.zeek) if args.learn is None else args.learn,
                      args.alert_burst, args.alert_window, args.memory_budget, args.feedback_training)
    ratings = None
    if args.test_ratings and not args.ratings:
        raise UsageError("--test-ratings needs --ratings")
    if args.ratings:
        from fedsentry.data.ratings import load_ratings_csv

        cols = (args.user_col, args.item_col, args.rating_col, args.rating_min, args.rating_max)
        ratings = (load_ratings_csv(args.ratings, *cols),
                   load_ratings_csv(args.test_ratings, *cols) if args.test_ratings else None)
    try:
        agent = Agent(cfg, source, training_source(args.train), ratings)
    except SchemaError as e:
        raise UsageError(f"--train {args.train}: {e}") from None
    signal.signal(signal.SIGTERM, lambda *a: agent.stop.set())
    logging.getLogger("fedsentry").info("agent=%s starting (broker %s, state %s)", args.id,
                                              redact_url(args.broker), state_dir)
    return agent.run()
