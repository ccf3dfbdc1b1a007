"""The REST body of a new job: one pydantic model per job family, generated from the family's typed spec
(`models.jobspec.JobSpec.settings`), joined in a union discriminated by the family.

Nothing here names a family: a family registered in `models.families` (a plug-in) gets its body, its OpenAPI
schema and its validation from its spec. The family is the body's `type`; for an anomaly detector `detector`
is the same choice by the command line's name; a body naming neither is a job of the family whose registry
holds the `algorithm` named, else of the default detector (`models.families.family_for`).

Every field is optional (absent means the spec's default, which its description states) and is validated by
the spec: an unknown setting, a value out of range or an algorithm parameter the algorithm does not take is a
422 naming the field. Numbers must be finite, integers fit in 64 bits, names are printable text."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, create_model, model_validator
from pydantic_core import PydanticCustomError

from api.validation import Int64, ItemId, Name, Scalar
from models.families import DEFAULT_DETECTOR, FAMILIES, JobFamily, detectors, family_for, job_spec
from models.jobspec import JobSpec, Setting
from models.params import SettingError
from wire.protocol import ID_RE

#: the largest list a setting may hold (an item catalogue); the body's size limit applies first
MAX_LIST = 1_000_000
MAX_PARAMS = 32


class JobBody(BaseModel):
    """What every family's body shares: its family (`type`), the id, and the check against the family's spec."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: str
    id: str | None = Field(None, pattern=ID_RE.pattern, description="job id (generated when absent)")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """`"type": null` is the default family, as every other setting's null is its default."""
        return {k: v for k, v in data.items() if not (k == "type" and v is None)} if isinstance(data, dict) else data

    def spec(self) -> JobSpec:
        """The validated typed settings; a PydanticCustomError naming the field otherwise."""
        try:
            return job_spec(self.type, self.model_dump(exclude={"type", "id", "detector"}, exclude_none=True))
        except SettingError as e:
            raise _bad(e.field.split("[")[0] or "algorithm_params", e.problem) from None

    @model_validator(mode="after")
    def _consistent(self) -> JobBody:
        detector = getattr(self, "detector", None)
        if detector is not None and detector != self.type:
            raise _bad("detector", f"{detector!r} and type {self.type!r} disagree: give one of them")
        self.spec()
        return self


def _bad(field: str, problem: str) -> PydanticCustomError:
    return PydanticCustomError("job", "{field}: {problem}", {"field": field, "problem": problem})


def _annotation(hint: Any) -> Any:
    """The body's type of a spec field (always optional: absent is the default)."""
    args, origin = list(typing.get_args(hint)), typing.get_origin(hint)
    if hint is bool:
        return bool
    if hint is int:
        return Int64
    if hint is float:
        return float
    if hint is str:
        return Name
    if origin is list:
        inner = Name if args == [str] else ItemId
        return Annotated[list[inner], Field(max_length=MAX_LIST)]  # type: ignore[valid-type]
    if origin is dict:
        return Annotated[dict[Name, Scalar], Field(max_length=MAX_PARAMS)]
    raise TypeError(f"a job setting of type {hint!r} has no body type")


def _described(s: Setting) -> str:
    if s.default is None or s.name == "algorithm_params":
        return s.help
    shown = str(s.default).lower() if isinstance(s.default, bool) else s.default
    return f"{s.help} (default {shown})" if s.default != [] else s.help


def family_body(f: JobFamily) -> type[JobBody]:
    """The body of one family's jobs."""
    fields: dict[str, Any] = {
        "type": (Literal[f.name], Field(f.name, description=f"the job family: {f.name} ({f.summary})")),
    }
    if f.detector:
        fields["detector"] = (Name | None, Field(
            None, description="the same choice as `type` for an anomaly detection job, by the command line's name "
            "(--detector)"))
    for s in f.spec.settings():
        fields[s.name] = (_annotation(s.hint) | None, Field(None, description=_described(s)))
    model: type[JobBody] = create_model(f"{f.name.title().replace('-', '')}JobBody", __base__=JobBody,
                                        __doc__=f"A {f.name} job: {f.summary}.", **fields)
    return model


def _family_of(body: Any) -> str:
    """The family a body means (the union's discriminator): its `type`, else its `detector` (an anomaly detector's
    name), else the family of its `algorithm`, else the default detector; "" (no family) for anything else."""
    if not isinstance(body, dict):
        return str(getattr(body, "type", ""))
    chosen, detector, algorithm = body.get("type"), body.get("detector"), body.get("algorithm")
    if chosen is None and detector is not None:
        return detector if detector in detectors() else ""
    if chosen is None:
        return family_for(None, algorithm if isinstance(algorithm, str) else None)
    return chosen if isinstance(chosen, str) else ""


def job_body() -> Any:
    """The body of POST /api/v1/jobs for the families registered now."""
    bodies = [Annotated[family_body(f), Tag(name)] for name, f in FAMILIES.items()]
    return Annotated[typing.Union[tuple(bodies)], Discriminator(  # noqa: UP007 (a union built at run time)
        _family_of, custom_error_type="job", custom_error_message="type: {problem}",
        custom_error_context={"field": "type", "problem": f"must be one of {', '.join(FAMILIES)} (default "
                              f"{DEFAULT_DETECTOR}); detector: one of the anomaly detectors, "
                              f"{', '.join(detectors())}"})]


def parse_job(values: dict[str, Any]) -> JobBody:
    """A body validated as the API does (for the command line, tests and scripts)."""
    from pydantic import TypeAdapter

    body: JobBody = TypeAdapter(job_body()).validate_python(values)
    return body
