"""Algorithm parameters from command-line flags, checked like the API's (`models.params`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedsentry.errors import UsageError
from models.families import family
from models.params import SettingError, applicable, check_params


def simulated_params(args: Any, name: str, **given: Any) -> dict[str, Any]:
    """The algorithm parameters a family's simulator has flags for, as given on the command line (None: not given;
    absent on a command without them), `given` replacing some."""
    return {**{s.name: getattr(args, s.name, None) for _, s in family(name).spec.simulated_parameters()}, **given}


def flag_params(cls: type | None, given: Mapping[str, Any], algorithm: str, strict: bool = True) -> dict[str, Any]:
    """The flags the user set (None = not given) that are parameters of `cls`.

    strict (simulate, demo): a flag the algorithm does not take is an error naming it; otherwise (bench,
    which runs many algorithms with one set of flags) each algorithm takes the flags that apply to it.
    cls None: a baseline, which takes no parameters."""
    given = {k: v for k, v in given.items() if v is not None}
    if cls is None:
        if strict and given:
            raise UsageError(f"--{next(iter(given)).replace('_', '-')} does not apply to {algorithm}")
        return {}
    if not strict:
        return applicable(cls, given)
    try:
        return check_params(cls, given)
    except SettingError as e:
        flag = f"--{e.field.replace('_', '-')}" if e.field else f"the {algorithm} parameters"
        raise UsageError(f"{flag}: {e.problem}") from None
