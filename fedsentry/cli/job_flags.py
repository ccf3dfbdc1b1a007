"""The flags of `fedsentry job create`, generated from the job families' typed specs (`JobSpec.settings`), the
same source as the REST body (api/job_body.py): one flag per setting of any registered family, whose help says
which families take it and each one's default (fedsentry/cli/spec_flags.py, which also makes `simulate`'s).
Nothing here names a family."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fedsentry.cli.spec_flags import Owners, add_flag, flag_of, given, owners
from fedsentry.errors import UsageError
from models.families import DEFAULT_DETECTOR, FAMILIES

__all__ = ["add_job_flags", "flag_of", "job_values"]


def _owners() -> Owners:
    """Each setting's name -> the families that have it (the default detector first) and their view of it."""
    names = sorted(FAMILIES, key=lambda n: n != DEFAULT_DETECTOR)
    return owners((name, s) for name in names for s in FAMILIES[name].spec.settings())


def add_job_flags(p: argparse.ArgumentParser) -> None:
    """--type, then a flag per job setting (algorithm parameters as --param)."""
    p.add_argument("--type", "--detector", dest="type", choices=sorted(FAMILIES),
                   help="the job family; --detector is the same flag, as in simulate and demo (default "
                   f"{DEFAULT_DETECTOR}, or the family of the --algorithm named): "
                   + "; ".join(f"{n}: {f.summary}" for n, f in FAMILIES.items()))
    for name, settings in _owners().items():
        if name == "algorithm_params":
            per = "; ".join(f"{n}: {s.help.partition('(')[2].rstrip(')')}" for n, s in settings)
            p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", dest="algorithm_params",
                           help=f"an algorithm parameter (repeatable), e.g. --param rho=20; {per}")
        else:
            add_flag(p, settings, len(FAMILIES))


def job_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line (None: not given, the spec's default)."""
    values = given(args, _owners())
    if "algorithm_params" in values:
        values["algorithm_params"] = dict(_param(p) for p in values["algorithm_params"])
    return values


def _param(text: str) -> tuple[str, Any]:
    """NAME=VALUE with VALUE read as JSON where it parses (numbers, true/false/null), else as a string."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise UsageError(f"--param {text!r}: expected NAME=VALUE")
    try:
        return name.strip(), json.loads(value)
    except ValueError:
        return name.strip(), value
