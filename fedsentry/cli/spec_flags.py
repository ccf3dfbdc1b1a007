"""Command-line flags generated from typed settings (`models.jobspec.Setting`): the one generator behind the flags
of `fedsentry job create` (every setting of every family: fedsentry/cli/job_flags.py) and of `fedsentry simulate`
(what each family's simulator takes: fedsentry/cli/simulate_flags.py). A flag's type, choices, default and help
come from the settings of its owners (the families, or for an algorithm parameter the algorithms, that take it)."""

from __future__ import annotations

import argparse
import typing
from collections.abc import Iterable
from typing import Any

from fedsentry.cli.common import number, whole_number
from fedsentry.errors import UsageError
from models.jobspec import Setting

#: a setting's name -> its owners (a family or an algorithm) and their view of it, in order of first appearance
Owners = dict[str, list[tuple[str, Setting]]]


def owners(pairs: Iterable[tuple[str, Setting]]) -> Owners:
    out: Owners = {}
    for owner, s in pairs:
        out.setdefault(s.name, []).append((owner, s))
    return out


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _grouped(pairs: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(value, the owners with it), in order of first appearance."""
    out: dict[str, list[str]] = {}
    for name, value in pairs:
        out.setdefault(value, []).append(name)
    return list(out.items())


def common_default(settings: list[tuple[str, Setting]]) -> Any:
    """The default all owners share, else None (each owner's own default applies)."""
    values = {_shown(s.default) for _, s in settings}
    return settings[0][1].default if len(values) == 1 else None


def setting_help(settings: list[tuple[str, Setting]], total: int) -> str:
    """What a setting means and its default, with the owners that take it where not all `total` do, and each
    owner's words and default where they differ."""
    who = "" if len(settings) == total else ", ".join(n for n, _ in settings) + ": "
    helps = _grouped([(n, s.help) for n, s in settings])
    words = helps[0][0] if len(helps) == 1 else "; ".join(f"{', '.join(ns)}: {h}" for h, ns in helps)
    defaults = _grouped([(n, _shown(s.default)) for n, s in settings if s.default not in (None, [])])
    if not defaults:
        return who + words
    if len(defaults) == 1 and len(defaults[0][1]) == len(settings):
        return f"{who}{words} (default {defaults[0][0]})"
    return f"{who}{words} (default " + "; ".join(f"{d} for {', '.join(ns)}" for d, ns in defaults) + ")"


def add_flag(p: Any, settings: list[tuple[str, Setting]], total: int, default: Any = None) -> None:
    """One flag for a setting (lists comma-separated or @FILE, one a line); `default` is what the command takes when
    it is not given (None: each owner's default, resolved by the spec)."""
    name, hint = settings[0][1].name, settings[0][1].hint
    flag, text = flag_name(name), setting_help(settings, total)
    choices = list(dict.fromkeys(c for _, s in settings for c in s.choices)) or None
    if hint is bool:
        p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=text)
    elif typing.get_origin(hint) is list:
        p.add_argument(flag, metavar="A,B,...|@FILE", default=default, help=text + ": comma-separated, or @FILE with "
                       "one a line")
    elif hint is int:
        p.add_argument(flag, type=lambda t: whole_number(t, -(2**63)), default=default, choices=choices, help=text)
    elif hint is float:
        p.add_argument(flag, type=number, default=default, choices=choices, help=text)
    else:
        p.add_argument(flag, default=default, choices=choices, help=text)


def given(args: argparse.Namespace, settings: Owners) -> dict[str, Any]:
    """The settings given on the command line (None: not given), lists read as `add_flag` takes them."""
    values: dict[str, Any] = {}
    for name, owned in settings.items():
        value = getattr(args, name, None)
        if value is None or value == []:
            continue
        values[name] = list_value(value, owned[0][1].hint, flag_name(name))
    return values


def list_value(value: Any, hint: Any, flag: str) -> Any:
    """A list flag's text as `add_flag` takes it (comma-separated or @FILE), numbers read as numbers where the
    setting's items are; any other value as it is."""
    if typing.get_origin(hint) is not list or not isinstance(value, str):
        return value
    items = _list(value, flag)
    if typing.get_args(hint) != (float,):
        return items
    try:
        return [number(v) for v in items]
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"{flag}: {e}") from None


def flag_of(field: str) -> str:
    """The flag that sets a spec's field (algorithm parameters come through --param)."""
    head, _, rest = field.partition(".")
    if head == "algorithm_params":
        return f"--param {rest}" if rest else "--param"
    return flag_name(head.split("[")[0])


def _list(text: str, flag: str) -> list[str]:
    if text.startswith("@"):
        try:
            with open(text[1:]) as f:
                return [line.strip() for line in f if line.strip()]
        except OSError as e:
            raise UsageError(f"{flag} {text}: {e.strerror}") from None
    return [i.strip() for i in text.split(",") if i.strip()]
