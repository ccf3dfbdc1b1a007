"""`fedsentry suppress add|list|remove`: the analysts' suppression rules (store.suppress), on the database."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import Any

from fedsentry.cli.common import DB_HELP, add_list_remove, analyst_transaction, positive_float, removed
from fedsentry.errors import UsageError

#: the flag of each field store.suppress names in its errors
FLAGS = {"port_min": "--port", "port_max": "--port", "value_min": "--min", "value_max": "--max",
         "match": "--device/--cidr/--port/--service/--feature"}


def _ports(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port or a range like 8000-8100, got {text!r}") from None
    return a, b


def register(groups: dict[str, Any], verbs: Any) -> None:
    s = verbs.add_parser("suppress", help="hold back the alerts of known traffic (stored, out of the listings and "
                                          "forwarding)").add_subparsers(dest="action", required=True)
    a = s.add_parser("add", help="add a rule: every condition given must hold")
    a.add_argument("--reason", required=True, help="why this traffic is held back (audited)")
    a.add_argument("--device", help="a device id, or a prefix ending in '*'")
    a.add_argument("--cidr", help="a network either end of the flow is in, e.g. 10.0.8.0/24")
    a.add_argument("--port", type=_ports, help="the responder's port, or a range like 8000-8100")
    a.add_argument("--service", help="the flow's service, e.g. dns")
    a.add_argument("--feature", help="an explaining feature whose value is within --min/--max")
    a.add_argument("--min", type=float, dest="value_min", help="with --feature: the smallest value held back")
    a.add_argument("--max", type=float, dest="value_max", help="with --feature: the largest value held back")
    a.add_argument("--expires-hours", type=positive_float, help="stop after this many hours (default: never)")
    a.add_argument("--retroactive", action="store_true", help="also hold back the matching alerts of the last 30 days")
    a.add_argument("--by", help="who adds it (default: the login name)")
    a.add_argument("--db", help=DB_HELP)
    ls, rm = add_list_remove(s, "suppress", "rule", "every rule, removed and expired ones too",
                             "stop a rule (recorded; what it held stays held)")
    for p in (a, ls, rm):
        p.set_defaults(func=run_suppress)


def run_suppress(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from store import suppress
    from store.db import Suppression, utcnow

    transaction, by = analyst_transaction(args)
    added: str | None = None
    engine: Any = None
    with transaction as s:
        if args.action == "add":
            port = args.port or (None, None)
            fields = {"device": args.device, "cidr": args.cidr, "port_min": port[0], "port_max": port[1],
                      "service": args.service, "feature": args.feature, "value_min": args.value_min,
                      "value_max": args.value_max}
            expires = utcnow() + timedelta(hours=args.expires_hours) if args.expires_hours else None
            try:
                rule = suppress.create(s, suppress.Match.parse(fields), args.reason, by, expires, args.retroactive)
            except ValueError as e:
                field = str(e).partition(":")[0]
                raise UsageError(f"{FLAGS.get(field, '--' + field)}: {e}") from None
            added, engine = rule.id, s.get_bind()
        elif args.action == "list":
            print("id\tcreated (UTC)\tby\tstate\theld\tmatch\treason")
            now = utcnow()
            for r in s.scalars(select(Suppression).order_by(Suppression.created.desc())):
                state = suppress.state(r, now)
                match = " ".join(f"{k}={v}" for k, v in r.match.items())
                print(f"{r.id}\t{r.created:%Y-%m-%d %H:%M}\t{r.created_by}\t{state}\t{r.held + r.retroactive}"
                      f"\t{match}\t{r.reason}")
        else:
            removed(suppress.remove(s, args.id, by), "suppression rule", "suppress", args.id)
    if added is not None:  # committed: applied to what is stored now, a batch a transaction
        from store.db import session_factory

        held = suppress.apply_retroactive(session_factory(engine), added) if args.retroactive else 0
        print(f"added rule {added}" + (f"; it held back {held} stored alerts and records" if args.retroactive
                                       else ""), file=sys.stderr)
        print(added)
    return 0
