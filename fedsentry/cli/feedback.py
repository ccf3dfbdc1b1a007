"""`fedsentry feedback add|list|remove`: analysts' false-positive feedback (store.feedback), on the database; the
running coordinator sends it to the device (docs/api.md: feedback)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fedsentry.cli.common import DB_HELP, add_list_remove, analyst_transaction, removed
from fedsentry.errors import UsageError


def register(groups: dict[str, Any], verbs: Any) -> None:
    f = verbs.add_parser("feedback", help="mark alerts as false positives: their device raises its threshold (within "
                                          "a cap) and, with its consent, learns from them").add_subparsers(
        dest="action", required=True)
    a = f.add_parser("add", help="mark one alert, flagged record or incident as a false positive")
    target = a.add_mutually_exclusive_group(required=True)
    target.add_argument("--alert", help="an alert id (an incident update: its records too)")
    target.add_argument("--record", help="a flagged record's id (/api/v1/records)")
    target.add_argument("--incident", help="an incident id: every alert and record of it")
    a.add_argument("--reason", required=True, help="why it is a false positive (audited)")
    a.add_argument("--by", help="who marks it (default: the login name)")
    a.add_argument("--db", help=DB_HELP)
    ls, rm = add_list_remove(f, "feedback", "action", "every action, undone ones too, with the effect its device "
                             "reported", "undo an action (recorded): the device's threshold comes back down")
    ls.add_argument("--device", help="one device's")
    for p in (a, ls, rm):
        p.set_defaults(func=run_feedback)


def _effect(e: dict[str, Any] | None) -> str:
    if e is None:
        return "not reported yet"
    return (f"{e['before']:.4g} -> {e['after']:.4g}" + (f" (capped at {e['cap']:.4g})" if e["capped"] else "")
            + f", {e['records']} records" + (f", trained on {e['trained']}" if e.get("training") else
                                             ", not used for training (no consent)"))


def run_feedback(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from store import feedback
    from store.db import Feedback

    transaction, by = analyst_transaction(args)
    with transaction as s:
        if args.action == "add":
            target = next(t for t in ("alert", "record", "incident") if getattr(args, t))
            try:
                fb = feedback.create(s, target, getattr(args, target), args.reason, by)
            except (feedback.NotFoundError, feedback.ConflictError) as e:
                raise UsageError(f"--{target}: {e}") from None
            except ValueError as e:
                raise UsageError(f"--{str(e).partition(':')[0]}: {e}") from None
            print(f"marked {fb.records} records of device {fb.device_id} as false positives; the coordinator sends "
                  "them to the device", file=sys.stderr)
            print(fb.id)
        elif args.action == "list":
            print("id\tcreated (UTC)\tby\tstate\tdevice\ttarget\trecords\teffect\treason")
            q = select(Feedback).order_by(Feedback.created.desc())
            if args.device:
                q = q.where(Feedback.device_id == args.device)
            for f in s.scalars(q):
                state = "active" if f.removed is None else f"removed by {f.removed_by}"
                print(f"{f.id}\t{f.created:%Y-%m-%d %H:%M}\t{f.created_by}\t{state}\t{f.device_id}\t"
                      f"{f.target} {f.target_id}\t{f.records}\t{_effect(f.effect)}\t{f.reason}")
        else:
            removed(feedback.remove(s, args.id, by), "feedback", "feedback", args.id)
    return 0
