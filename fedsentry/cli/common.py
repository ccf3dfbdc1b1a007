"""Arguments and validation shared by the simulate and bench commands."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any

import numpy as np

from fedsentry.errors import UsageError

log = logging.getLogger("fedsentry.cli")

DB_HELP = "database URL (default $FEDSENTRY_DB_URL or sqlite:///fedsentry.db)"


def fraction(text: str) -> float:
    v = _float(text, "fraction")
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def unit_open(text: str) -> float:
    v = _float(text, "value")
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return v


def share(text: str) -> float:
    v = _float(text, "value")
    if not 0 <= v < 0.5:
        raise argparse.ArgumentTypeError(f"must be in [0, 0.5), got {text}")
    return v


def whole_number(text: str, least: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {text}" if least else
                                         f"must be 0 or more, got {text}")
    return v


def positive_int(text: str) -> int:
    return whole_number(text, 1)


def non_negative_int(text: str) -> int:
    return whole_number(text, 0)


def positive_float(text: str) -> float:
    v = _float(text, "value")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return v


def number(text: str) -> float:
    """A finite number."""
    return _float(text, "value")


def _float(text: str, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not np.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def add_clients_arg(p: argparse.ArgumentParser) -> None:
    """How many clients a simulation splits its data into (the families' settings are generated from their specs:
    fedsentry/cli/simulate_flags.py)."""
    p.add_argument("--clients", type=positive_int, default=100, help="number of clients (default 100)")


def add_federation_args(p: argparse.ArgumentParser, rounds: int) -> None:
    """Rounds, sampling and seed of a command that runs no family of its own choosing (bench robustness runs each)."""
    p.add_argument("--fraction", type=fraction, default=0.1, help="share of clients sampled per round (0, 1]")
    p.add_argument("--rounds", type=positive_int, default=rounds, help=f"communication rounds (default {rounds})")
    p.add_argument("--seed", type=int, default=0, help="seed for split, partition, sampling and init (default 0)")


def add_rating_columns(g) -> None:
    """Columns and scale of a ratings CSV (simulate/bench recsys, and the agent's ratings shard)."""
    g.add_argument("--user-col", default="userId", help="ratings CSV: user id column (default userId)")
    g.add_argument("--item-col", default="movieId", help="ratings CSV: item id column (default movieId)")
    g.add_argument("--rating-col", default="rating", help="ratings CSV: rating column (default rating)")
    g.add_argument("--rating-min", type=float, default=0.5, help="lowest valid rating (default 0.5)")
    g.add_argument("--rating-max", type=float, default=5.0, help="highest valid rating (default 5)")




def add_credential_args(p: argparse.ArgumentParser, username_help: str) -> None:
    """Broker username and password: the password from a file or the environment, never the command line."""
    p.add_argument("--username", default=os.environ.get("FEDSENTRY_MQTT_USERNAME"), help=username_help)
    p.add_argument("--mqtt-password-file", metavar="F",
                   help="read the broker password from this file (default $FEDSENTRY_MQTT_PASSWORD_FILE, "
                        "else the password is $FEDSENTRY_MQTT_PASSWORD)")
    p.add_argument("--password", help="deprecated: every local user can read it in the process list; use "
                                      "--mqtt-password-file or $FEDSENTRY_MQTT_PASSWORD")


def broker_password(args: argparse.Namespace) -> str | None:
    """The broker password of add_credential_args, with a warning for one given on the command line."""
    from wire.mqtt import parse_broker_url, password_from_env

    if args.password:
        log.warning("--password is visible to every local user in the process list: use --mqtt-password-file "
                    "F or $FEDSENTRY_MQTT_PASSWORD")
    if args.broker and args.broker != os.environ.get("FEDSENTRY_BROKER_URL"):
        try:
            in_url = parse_broker_url(args.broker).password
        except ValueError:
            in_url = None  # reported where the URL is checked
        if in_url:
            log.warning("a password in --broker is visible to every local user in the process list: give the "
                        "URL without it and the password with --mqtt-password-file F or $FEDSENTRY_MQTT_PASSWORD")
    try:
        return password_from_env(args.password, args.mqtt_password_file)
    except OSError as e:
        raise UsageError(f"cannot read the MQTT password file {e.filename}: {e.strerror}") from None


def utc_time(text: str) -> datetime:
    """An ISO 8601 time as the database stores times (naive UTC): an offset is honoured (10:00+01:00 is 09:00
    UTC), a time without one is UTC; a bare date is its midnight."""
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time such as 2026-11-23T10:00:00+01:00 (no offset: "
                                         f"UTC), got {text!r}") from None
    if t.tzinfo is None:
        return t
    try:
        return t.astimezone(timezone.utc).replace(tzinfo=None)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"out of range once converted to UTC: {text!r}") from None


def analyst_transaction(args: argparse.Namespace) -> tuple[Any, str]:
    """The analysts' commands (suppress, feedback): a transaction on --db, migrated first, and who acts (--by, else
    the login name)."""
    import getpass

    from store.db import make_engine, migrate, session_factory

    engine = make_engine(args.db)
    migrate(engine)
    return session_factory(engine).begin(), getattr(args, "by", None) or getpass.getuser()


def add_list_remove(verbs: Any, command: str, thing: str, list_help: str, remove_help: str) -> tuple[Any, Any]:
    """The `list` and `remove ID` parsers of an analysts' command (suppress, feedback)."""
    ls = verbs.add_parser("list", help=list_help)
    ls.add_argument("--db", help=DB_HELP)
    rm = verbs.add_parser("remove", help=remove_help)
    rm.add_argument("id", help=f"the {thing}'s id (first column of `fedsentry {command} list`)")
    rm.add_argument("--by", help="who does it (default: the login name)")
    rm.add_argument("--db", help=DB_HELP)
    return ls, rm


def removed(row: Any, thing: str, command: str, ident: str) -> None:
    """What an analysts' `remove ID` says: done, or that there is no such thing (UsageError)."""
    if row is None:
        raise UsageError(f"no {thing} with id {ident!r} (see `fedsentry {command} list`)")
    print(f"removed {ident}", file=sys.stderr)
