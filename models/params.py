"""Algorithm parameters, checked against the algorithm's own constructor: the one typed schema.

An algorithm's hyper-parameters are the keyword arguments of its ``__init__`` (scikit-learn's rule);
the problem's dimensions (``n_features``, ``n_items``) and ``rank`` are set by the job, not here.
`check_params` refuses a name the algorithm does not take, coerces each value to the annotated type,
and builds the algorithm once so its own range checks run: CLI, API and demo all go through it.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Mapping
from typing import Any


class SettingError(ValueError):
    """A setting or parameter that cannot be used: which one (`field`, "" when the problem is their
    combination) and what is wrong with it. Every entry point names the field its own way (an API body
    path, a command-line flag) from these two parts."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field, self.problem = field, problem

    def within(self, prefix: str) -> SettingError:
        """The same error for a field nested under `prefix`."""
        return SettingError(f"{prefix}.{self.field}" if self.field else prefix, self.problem)


#: set by the job (its data and rank), never an algorithm parameter
PROBLEM_ARGS = ("n_features", "n_items", "rank")


def parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The hyper-parameters a class's constructor takes (name -> parameter), problem dimensions excluded."""
    sig = inspect.signature(cls)  # the constructor's parameters, without self
    return {n: p for n, p in sig.parameters.items() if n != "self" and n not in PROBLEM_ARGS
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def hints(cls: type) -> dict[str, Any]:
    """The annotated types of a class's constructor arguments (its bases' too)."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is not None:
            try:
                out.update(typing.get_type_hints(init))
            except (NameError, TypeError):  # an annotation that cannot be resolved: no coercion for it
                continue
    return out


def coerce(name: str, value: Any, hint: Any) -> Any:
    """value as the annotated type: int, float, bool, str, list[...] or dict[str, ...], None where
    Optional; SettingError names the field and what was expected."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise SettingError(name, f"expected a list, got {_shown(value)}")
        (inner,) = typing.get_args(hint) or (Any,)
        return [coerce(f"{name}[{i}]", v, inner) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise SettingError(name, f"expected an object, got {_shown(value)}")
        return dict(value)
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise SettingError(name, "must not be null")
    listed = [t for t in options if typing.get_origin(t) in (list, dict)]
    if listed and len(options) == 2 and type(None) in options:  # an optional list or object
        return coerce(name, value, listed[0])
    for t in options:
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int | float) and not isinstance(value, bool):
            if float(value) != int(value):
                raise SettingError(name, f"expected a whole number, got {_shown(value)}")
            return int(value)
        if t is float and isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise SettingError(name, f"expected a finite number, got {_shown(value)}")
            return float(value)
        if t is str and isinstance(value, str):
            return value
    wanted = " or ".join(getattr(t, "__name__", str(t)) for t in options)
    raise SettingError(name, f"expected {wanted}, got {_shown(value)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_params(cls: type, params: Mapping[str, Any], **problem: Any) -> dict[str, Any]:
    """The parameters, validated and coerced; SettingError names the first bad one.

    problem: the job's dimensions (n_features=..., rank=...), used to build the algorithm once so that
    its own range checks run."""
    known = parameters(cls)
    unknown = sorted(set(params) - set(known))
    if unknown:
        takes = ", ".join(known) or "no parameters"
        raise SettingError(unknown[0], f"not a parameter of {getattr(cls, 'name', '') or cls.__name__} "
                                       f"(it takes {takes})")
    annotated = hints(cls)
    out = {n: (coerce(n, v, annotated[n]) if n in annotated else v) for n, v in params.items()}
    if problem:
        try:
            cls(**problem, **out)
        except (TypeError, ValueError) as e:
            raise SettingError("", str(e)) from None
    return out


def applicable(cls: type, params: Mapping[str, Any]) -> dict[str, Any]:
    """Only the given parameters the class takes (a benchmark applies one setting to many algorithms)."""
    known = parameters(cls)
    return {k: v for k, v in params.items() if k in known and v is not None}
