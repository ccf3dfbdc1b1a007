"""Algorithm parameters from command-line flags, checked like the API's (`models.params`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from fedsentry.errors import UsageError
from models.families import family
from models.params import SettingError, applicable, check_params


def default_algorithm(name: str) -> str:
    """The algorithm a family's simulator runs unless told (its spec's `simulated` default)."""
    return str(next(s.default for s in family(name).spec.simulated() if s.name == "algorithm"))


def simulated_params(args: Any, name: str, **given: Any) -> dict[str, Any]:
    """The algorithm parameters a family's simulator has flags for, as given on the command line (None: not given;
    absent on a command without them), `given` replacing some."""
    return {**{s.name: getattr(args, s.name, None) for _, s in family(name).spec.simulated_parameters()}, **given}


def flag_params(cls: type | None, given: Mapping[str, Any], algorithm: str, strict: bool = True,
                problem: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The flags the user set (None = not given) that are parameters of `cls`.

    strict (simulate, demo): a flag the algorithm does not take is an error naming it; otherwise (bench,
    which runs many algorithms with one set of flags) each algorithm takes the flags that apply to it.
    cls None: a baseline, which takes no parameters. problem: the dimensions to build the algorithm with once."""
    given = {k: v for k, v in given.items() if v is not None}
    if cls is None:
        if strict and given:
            raise UsageError(f"--{next(iter(given)).replace('_', '-')} does not apply to {algorithm}")
        return {}
    if not strict:
        chosen = applicable(cls, given)
    else:
        try:
            chosen = check_params(cls, given)
        except SettingError as e:
            flag = f"--{e.field.replace('_', '-')}" if e.field else f"the {algorithm} parameters"
            raise UsageError(f"{flag}: {e.problem}") from None
    if problem is not None:  # built once: a value its constructor refuses is named by its flag
        try:
            cls(**problem, **chosen)
        except ValueError as e:
            name = next((k for k in chosen if str(e).startswith(k)), None)
            raise UsageError(f"--{name.replace('_', '-')}: {e}" if name else str(e)) from None
    return chosen


def private_settings(args: argparse.Namespace) -> tuple[bool, float]:
    """--private and --private-dropout, checked: (private mode, the share of devices gone after each upload)."""
    private, dropout = bool(getattr(args, "private", False)), getattr(args, "private_dropout", None)
    if dropout is not None and not private:
        raise UsageError("--private-dropout is private mode's: add --private")
    if dropout is not None and dropout > 1 / 3:
        raise UsageError(f"--private-dropout {dropout:g}: the secure sum survives at most a third of a round dropping")
    if private:
        try:
            import cryptography  # noqa: F401  (the `private` extra)
        except ImportError:
            raise UsageError("--private needs the private extra: pip install 'fedsentry[private]'") from None
    return private, dropout or 0.0
