"""The flags of `fedsentry job create`, generated from the job families' typed specs (`JobSpec.settings`), the
same source as the REST body (api/job_body.py): one flag per setting of any registered family, whose help says
which families take it and each one's default. Nothing here names a family."""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

from fedsentry.cli.common import number, whole_number
from fedsentry.errors import UsageError
from models.families import DEFAULT_DETECTOR, FAMILIES
from models.jobspec import Setting


def _owners() -> dict[str, list[tuple[str, Setting]]]:
    """Each setting's name -> the families that have it (the default detector first) and their view of it."""
    names = sorted(FAMILIES, key=lambda n: n != DEFAULT_DETECTOR)
    out: dict[str, list[tuple[str, Setting]]] = {}
    for name in names:
        for s in FAMILIES[name].spec.settings():
            out.setdefault(s.name, []).append((name, s))
    return out


def _shown(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _grouped(pairs: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(value, the families with it), in order of first appearance."""
    out: dict[str, list[str]] = {}
    for name, value in pairs:
        out.setdefault(value, []).append(name)
    return list(out.items())


def _help(owners: list[tuple[str, Setting]]) -> str:
    """What a setting means and its default, with the families that take it where not all do, and each
    family's words and default where they differ."""
    who = "" if len(owners) == len(FAMILIES) else ", ".join(n for n, _ in owners) + ": "
    helps = _grouped([(n, s.help) for n, s in owners])
    words = helps[0][0] if len(helps) == 1 else "; ".join(f"{', '.join(ns)}: {h}" for h, ns in helps)
    defaults = _grouped([(n, _shown(s.default)) for n, s in owners if s.default not in (None, [])])
    if not defaults:
        return who + words
    if len(defaults) == 1 and len(defaults[0][1]) == len(owners):
        return f"{who}{words} (default {defaults[0][0]})"
    return f"{who}{words} (default " + "; ".join(f"{d} for {', '.join(ns)}" for d, ns in defaults) + ")"


def add_job_flags(p: argparse.ArgumentParser) -> None:
    """--type, then a flag per job setting (lists comma-separated or @FILE, one a line; algorithm parameters as
    --param)."""
    p.add_argument("--type", "--detector", dest="type", choices=sorted(FAMILIES),
                   help="the job family; --detector is the same flag, as in simulate and demo (default "
                   f"{DEFAULT_DETECTOR}, or the family of the --algorithm named): "
                   + "; ".join(f"{n}: {f.summary}" for n, f in FAMILIES.items()))
    for name, owners in _owners().items():
        flag, hint = "--" + name.replace("_", "-"), owners[0][1].hint
        if name == "algorithm_params":
            per = "; ".join(f"{n}: {s.help.partition('(')[2].rstrip(')')}" for n, s in owners)
            p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", dest="algorithm_params",
                           help=f"an algorithm parameter (repeatable), e.g. --param rho=20; {per}")
        elif hint is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=_help(owners))
        elif typing.get_origin(hint) is list:
            p.add_argument(flag, metavar="A,B,...|@FILE", help=_help(owners) + ": comma-separated, or @FILE with one "
                           "a line")
        elif hint is int:
            p.add_argument(flag, type=lambda t: whole_number(t, -(2**63)), help=_help(owners))
        elif hint is float:
            p.add_argument(flag, type=number, help=_help(owners))
        else:
            p.add_argument(flag, help=_help(owners))


def job_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line (None: not given, the spec's default)."""
    values: dict[str, Any] = {}
    for name, owners in _owners().items():
        given = getattr(args, name, None)
        if given is None or given == []:
            continue
        if name == "algorithm_params":
            values[name] = dict(_param(p) for p in given)
        elif typing.get_origin(owners[0][1].hint) is list:
            values[name] = _list(given, "--" + name.replace("_", "-"))
        else:
            values[name] = given
    return values


def flag_of(field: str) -> str:
    """The flag that sets a spec's field (algorithm parameters come through --param)."""
    head, _, rest = field.partition(".")
    if head == "algorithm_params":
        return f"--param {rest}" if rest else "--param"
    return "--" + head.split("[")[0].replace("_", "-")


def _param(text: str) -> tuple[str, Any]:
    """NAME=VALUE with VALUE read as JSON where it parses (numbers, true/false/null), else as a string."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise UsageError(f"--param {text!r}: expected NAME=VALUE")
    try:
        return name.strip(), json.loads(value)
    except ValueError:
        return name.strip(), value


def _list(text: str, flag: str) -> list[str]:
    if text.startswith("@"):
        try:
            with open(text[1:]) as f:
                return [line.strip() for line in f if line.strip()]
        except OSError as e:
            raise UsageError(f"{flag} {text}: {e.strerror}") from None
    return [i.strip() for i in text.split(",") if i.strip()]
