"""Typed, versioned messages: what a phase of a job sends, declared once as a class and read the same way on both
sides (no dict with magic keys crosses a boundary).

A message is a dataclass. Fields typed `np.ndarray` travel as named arrays (`array()` declares the rank and the
kinds of number they may hold); one field declared with `open_arrays()` holds every other array (an algorithm's
upload, whose names and shapes the algorithm defines); the other fields travel as JSON in the header's meta,
with the message's version under "v" (a message without one is version 1). `parts` gives what the wire carries
and `from_parts` reads it back, raising MessageError (with a short reason, as the coordinator counts refusals) for
anything missing, surplus, of the wrong kind or of another version. What a message's values must satisfy in a
given job (shapes against the job's features, bounds) is checked by the job's runner on the typed message.

`wire.messages` puts a message in an envelope and reads one out of it; a family declares its messages in its own
package (models/detection/messages.py, models/recsys/messages.py) and its runner's and participant's phase
tables name them.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias, TypeVar

import numpy as np

from models.core.sampling import Draw

M = TypeVar("M", bound="Message")

#: the largest message the wire carries (wire.protocol.MAX_PAYLOAD is this): a job whose messages would not fit is
#: refused when it is created (models.jobspec.JobSpec.check_resources)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class MessageError(ValueError):
    """A message that must be refused; `reason` is a short label for counting."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def array(ndim: int = 1, kinds: str = "fiu", default: Any = dataclasses.MISSING) -> Any:
    """A field that travels as one array of `ndim` dimensions holding numbers of these kinds (numpy's dtype
    kinds: f float, i signed, u unsigned, b bool)."""
    return field(default=default, metadata={"ndim": ndim, "kinds": kinds})


def open_arrays(prefix: str = "") -> Any:
    """A field holding a set of arrays the message does not name: those whose wire names start with `prefix`
    (which the field's keys leave out), or, without one, every array no other field takes (an algorithm's upload
    or broadcast)."""
    return field(default_factory=dict, metadata={"open": True, "prefix": prefix})


@dataclass(kw_only=True)
class Message:
    #: the envelope kind it travels as
    kind: ClassVar[str] = ""
    #: bumped when a field changes meaning or goes away; a side refuses a version it does not read
    version: ClassVar[int] = 1

    def parts(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, meta) as the wire carries them."""
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {"v": self.version}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("open"):
                arrays.update({f.metadata["prefix"] + k: v for k, v in value.items()})
            elif "ndim" in f.metadata:
                if value is not None:
                    arrays[f.name] = np.asarray(value)
            elif value is not None:  # absent is None
                meta[f.name] = value
        return arrays, meta

    @classmethod
    def from_parts(cls: type[M], arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> M:
        version = meta.get("v", 1)
        if version != cls.version:
            raise MessageError("version", f"a {cls.kind} message of version {version!r}; this side reads version "
                                          f"{cls.version}")
        hints = typing.get_type_hints(cls)
        rest: dict[str, np.ndarray] = dict(arrays)
        values: dict[str, Any] = {}
        open_field = None
        for f in dataclasses.fields(cls):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            prefix = f.metadata.get("prefix")
            if prefix:
                values[f.name] = {k[len(prefix):]: rest.pop(k) for k in [k for k in rest if k.startswith(prefix)]}
            elif f.metadata.get("open"):
                open_field = f.name
            elif "ndim" in f.metadata:
                if f.name not in rest:
                    if required:
                        raise MessageError("shape", f"a {cls.kind} message needs the array {f.name!r}")
                    continue
                a = rest.pop(f.name)
                if a.ndim != f.metadata["ndim"] or a.dtype.kind not in f.metadata["kinds"]:
                    raise MessageError("shape" if a.ndim != f.metadata["ndim"] else "dtype",
                                       f"array {f.name!r} of a {cls.kind} message must have {f.metadata['ndim']} "
                                       f"dimension(s) of kind {f.metadata['kinds']}, got {a.shape} {a.dtype}")
                values[f.name] = a
            elif f.name in meta:
                values[f.name] = _typed(cls.kind, f.name, meta[f.name], hints[f.name])
            elif required:
                raise MessageError("malformed", f"a {cls.kind} message needs {f.name!r}")
        if open_field is not None:
            values[open_field] = rest
        elif rest:
            raise MessageError("shape", f"a {cls.kind} message has no arrays {sorted(rest)}")
        return cls(**values)


def _typed(kind: str, name: str, value: Any, hint: Any) -> Any:
    """A meta value checked against its field's type (None where the type allows it)."""
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    base = next((a for a in args if a is not type(None)), hint) if type(None) in args else hint
    origin = typing.get_origin(base)
    ok = {str: lambda v: isinstance(v, str),
          bool: lambda v: isinstance(v, bool),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
    if base in ok:
        if not ok[base](value):
            raise MessageError("malformed",
                               f"{name!r} of a {kind} message must be a {base.__name__}, got {value!r}"[:200])
        return float(value) if base is float else value
    if origin is list:
        (item,) = typing.get_args(base) or (Any,)
        if not isinstance(value, list) or (item in ok and not all(ok[item](v) for v in value)):
            raise MessageError("malformed", f"{name!r} of a {kind} message must be a list of "
                                            f"{getattr(item, '__name__', item)}")
        return value
    if origin is dict or base is dict:
        if not isinstance(value, dict):
            raise MessageError("malformed", f"{name!r} of a {kind} message must be an object")
        return value
    return value  # Any


@dataclass(kw_only=True)
class RoundMessage(Message):
    """The coordinator's round message, retained on the job's topic: the phase, the job's family and algorithm
    (with its parameters), which agents are asked, the algorithm's broadcast, and the state clients start from
    (until every participant has it). A family's round message adds its own fields (`models.detection.messages`,
    `models.recsys.messages`).

    Which agents are asked (`asks`): listed in `sampled` up to models.core.sampling.LIST_MAX participants, else
    drawn: `salt` and `bound`, each device testing its own hash (an older agent, which reads only `sampled`, then
    takes part in no round: it is never asked)."""

    kind: ClassVar[str] = "round"
    phase: str
    type: str = ""  # older coordinators named no family: the registry's LEGACY_JOBS
    sampled: list[str] = field(default_factory=list)
    salt: int | None = None
    bound: int | None = None
    algorithm: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    broadcast: dict[str, np.ndarray] = open_arrays()
    init: dict[str, np.ndarray] = open_arrays("init.")
    #: private mode: the secure sum this round is a step of (its announcement and step, models.private.relay) and
    #: the step's arrays (the advertised public keys, who uploaded and who dropped)
    secagg: dict[str, Any] | None = None
    secagg_arrays: dict[str, np.ndarray] = open_arrays("secagg.")

    def __post_init__(self) -> None:
        self.draw()  # a malformed draw is refused when the message is read, not when a device tests itself

    def draw(self) -> Draw | None:
        """The round's draw (None: the round lists whom it asks); MessageError for a salt without a bound."""
        if self.salt is None and self.bound is None:
            return None
        try:
            return Draw(self.salt, self.bound)  # type: ignore[arg-type]
        except ValueError as e:
            raise MessageError("malformed", f"a {self.kind} message's draw: {e}") from None

    def asks(self, device: str) -> bool:
        """Whether this round asks the device (models.core.sampling: the coordinator decides by the same test)."""
        draw = self.draw()
        return device in self.sampled if draw is None else draw.asks(device)


#: a message class (what a phase table names: the reply a phase expects)
MessageType: TypeAlias = "type[Message]"


@dataclass(kw_only=True)
class Upload(Message):
    """A client step's upload: the arrays the algorithm's `client_update` returns for one client (its shapes are
    the algorithm's: the runner checks them against what the algorithm would send)."""

    kind: ClassVar[str] = "upload"
    arrays: dict[str, np.ndarray] = open_arrays()


@dataclass(kw_only=True)
class Decline(Message):
    """An agent that cannot take part in a round says why (its data lacks the job's features, ...)."""

    kind: ClassVar[str] = "decline"
    reason: str = ""
