"""The typed settings of a training job, shared by the API, the command line, the demo and the runners.

Each job family subclasses `JobSpec` with its own fields. `from_dict` is the only way in from untyped
input (a JSON body, a stored job row): an unknown setting, a value of the wrong type or out of range,
an unknown algorithm or an algorithm parameter the algorithm does not take is a `SettingError` naming the
field (``algorithm_params.<name>`` for an algorithm parameter).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from models.params import SettingError, check_params, coerce

S = TypeVar("S", bound="JobSpec")


@dataclass
class JobSpec:
    #: the family's registry of federated algorithms (name -> class)
    algorithms: ClassVar[Mapping[str, type]] = {}
    family: ClassVar[str] = ""
    #: settings a job of this family cannot do without -> what they are (for the message)
    required: ClassVar[dict[str, str]] = {}

    algorithm: str = ""
    rank: int = 3
    rounds: int = 30
    fraction: float = 0.3
    seed: int = 0
    min_agents: int = 1
    max_agents: int | None = None
    deadline: float = 10.0
    algorithm_params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls: type[S], values: Mapping[str, Any]) -> S:
        """Validate untyped settings (None means the default)."""
        for name, what in cls.required.items():
            if values.get(name) is None:
                raise SettingError(name, f"a {cls.family} job needs {what}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise SettingError(unknown[0], f"not a setting of a {cls.family} job")
        hints = typing.get_type_hints(cls)
        spec = cls(**{k: coerce(k, v, hints[k]) for k, v in values.items() if v is not None})
        spec.validate()
        return spec

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def problem(self) -> dict[str, int]:
        """The dimensions an algorithm of this job is built with (besides its parameters)."""
        raise NotImplementedError

    def validate(self) -> None:
        """The common settings, then the family's (`check_family`), then the algorithm's parameters."""
        self.check_common()
        self.check_family()
        cls = self.algorithms[self.algorithm]
        try:
            self.algorithm_params = check_params(cls, self.algorithm_params, **self.problem())
        except SettingError as e:
            raise e.within("algorithm_params") from None

    def check_family(self) -> None:
        """A family's own checks."""

    def check_common(self) -> None:
        if not self.algorithm:
            self.algorithm = self.default_algorithm()
        if self.algorithm not in self.algorithms:
            raise SettingError("algorithm", f"must be one of {', '.join(sorted(self.algorithms))} for a {self.family} "
                             f"job, got {self.algorithm!r}")
        check(self.rank >= 1, "rank", "must be at least 1")
        check(1 <= self.rounds <= 100_000, "rounds", "must be between 1 and 100000")
        check(0 < self.fraction <= 1, "fraction", "must be in (0, 1]")
        check(0 <= self.seed < 2**31, "seed", "must be in [0, 2^31)")
        check(1 <= self.min_agents <= 1_000_000, "min_agents", "must be between 1 and 1000000")
        check(self.max_agents is None or self.max_agents >= self.min_agents, "max_agents",
               "must be at least min_agents")
        check(0 < self.deadline <= 3600, "deadline", "must be in (0, 3600] seconds")

    @classmethod
    def default_algorithm(cls) -> str:
        return next(iter(cls.algorithms))

    def make_algorithm(self, **problem: int) -> Any:
        """The job's algorithm; `problem` replaces dimensions known only once the job runs (the number of
        encoded features after the statistics phase)."""
        return self.algorithms[self.algorithm](**{**self.problem(), **problem}, **self.algorithm_params)


def check(ok: bool, name: str, problem: str) -> None:
    """Raise the SettingError naming `name` unless ok."""
    if not ok:
        raise SettingError(name, problem)
