"""The typed settings of a training job, shared by the API, the command line, the demo and the runners.

Each job family subclasses `JobSpec` with its own fields, each declared with `setting` (its default and the
words that explain it). Every surface is generated from them (`JobSpec.settings`): the REST body of the job's
family (api/job_body.py), the flags of `fedsentry job create`, their help and the OpenAPI schema, so that a
default or an explanation is written once. `from_dict` is the only way in from untyped
input (a JSON body, a stored job row): an unknown setting, a value of the wrong type or out of range,
an unknown algorithm or an algorithm parameter the algorithm does not take is a `SettingError` naming the
field (``algorithm_params.<name>`` for an algorithm parameter).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, replace
from typing import Any, ClassVar, Final, TypeVar

from models.core.messages import MAX_MESSAGE_BYTES
from models.params import SettingError, check_params, coerce, hints, parameters

#: what one client step may ask of an agent beyond its records (the agent's unit allows 120 MiB in all)
MAX_CLIENT_BYTES = 48 * 1024 * 1024

S = TypeVar("S", bound="JobSpec")


def setting(default: Any = MISSING, *, help: str, factory: Any = None) -> Any:
    """A spec field: its default (or a factory for a mutable one) and what it means, in words every surface shows."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Setting:
    """One setting of a family as the surfaces show it."""

    name: str
    hint: Any  # the field's type (resolved), without `| None`: a setting left out is its default anyway
    default: Any
    help: str
    choices: Sequence[str] = ()


#: where a simulation's defaults differ from a job's, in every family: a simulation splits one data set into many
#: clients (100 by default) and follows the papers, 100 rounds sampling 10 % of the clients each; a job on real agents
#: samples 30 % of a smaller fleet for 30 rounds (the spec's defaults)
SIMULATION_DEFAULTS: Final[Mapping[str, Any]] = {"rounds": 100, "fraction": 0.1}


@dataclass(frozen=True)
class Simulation:
    """What a family's in-process simulator (`fedsentry simulate`) takes, declared next to its settings so that
    `simulate`'s flags are generated like `job create`'s: the settings it reads (each a flag), the algorithms it runs
    (the federated ones and the baselines), the algorithm parameters that have a flag of their own (name -> what it
    means; the type and each algorithm's default come from the constructors), the choices a flag offers, and the
    simulator's defaults where they differ from a job's (besides SIMULATION_DEFAULTS)."""

    settings: tuple[str, ...]
    algorithms: tuple[str, ...]
    parameters: Mapping[str, str] = field(default_factory=dict)
    choices: Mapping[str, Sequence[str]] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class JobSpec:
    #: the family's registry of federated algorithms (name -> class)
    algorithms: ClassVar[Mapping[str, type]] = {}
    family: ClassVar[str] = ""
    #: settings a job of this family cannot do without -> what they are (for the message)
    required: ClassVar[dict[str, str]] = {}
    #: the family's in-process simulator, if it has one (`fedsentry simulate`)
    simulation: ClassVar[Simulation | None] = None

    algorithm: str = setting("", help="the federated algorithm")
    rank: int = setting(3, help="subspace dimension or latent factors")
    rounds: int = setting(30, help="training rounds")
    fraction: float = setting(0.3, help="share of agents sampled per round")
    seed: int = setting(0, help="sampling and initialisation seed")
    min_agents: int = setting(1, help="wait until this many agents are online")
    max_agents: int | None = setting(None, help="take part with at most this many agents (none: all online)")
    deadline: float = setting(10.0, help="seconds to wait for a round's uploads")
    algorithm_params: dict[str, Any] = setting(factory=dict, help="the algorithm's parameters: its constructor's "
                                               "keyword arguments")

    @classmethod
    def settings(cls) -> list[Setting]:
        """Every setting with its type, default and words (a field a subclass redeclares keeps its base's words
        unless it gives its own). The algorithm shows its choices; its parameters those of the default
        algorithm with their defaults."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            declared = [getattr(b, "__dataclass_fields__", {}).get(f.name) for b in cls.__mro__]
            words = next((d.metadata["help"] for d in declared if d is not None and d.metadata.get("help")), "")
            default = f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
            if f.name == "algorithm":
                default = cls.default_algorithm()
                words = f"{words}: one of {', '.join(cls.algorithms)}"
            elif f.name == "algorithm_params":
                words = f"{words} ({default_algorithm_params(cls.algorithms[cls.default_algorithm()])})"
                default = None
            out.append(Setting(f.name, _without_none(hints[f.name]), default, words or f.name.replace("_", " ")))
        return out

    @classmethod
    def simulated(cls) -> list[Setting]:
        """The settings the family's simulator takes (none without one), the algorithm first, with the simulator's
        defaults."""
        sim = cls.simulation
        if sim is None:
            return []
        defaults = {**SIMULATION_DEFAULTS, "algorithm": cls.default_algorithm(), **sim.defaults}
        algorithm = Setting("algorithm", str, defaults["algorithm"], "the federated algorithm or a baseline",
                            sim.algorithms)
        return [algorithm, *(replace(s, default=defaults.get(s.name, s.default), choices=sim.choices.get(s.name, ()))
                             for s in cls.settings() if s.name in sim.settings)]

    @classmethod
    def simulated_parameters(cls) -> list[tuple[str, Setting]]:
        """(algorithm, its view of the parameter) for each algorithm parameter the simulator gives a flag of its own
        and each federated algorithm that takes it."""
        sim = cls.simulation
        if sim is None:
            return []
        return [(algorithm, Setting(name, _without_none(hints(klass)[name]), parameters(klass)[name].default, words,
                                    sim.choices.get(name, ())))
                for name, words in sim.parameters.items() for algorithm, klass in cls.algorithms.items()
                if name in parameters(klass)]

    def check_simulated(self) -> None:
        """The checks of a job's settings that concern what the simulator takes (`simulated`): the common ones and
        the family's, whose refusals of other settings (the item catalogue of a recommendation job, which a
        simulation reads from its data) are not the simulation's."""
        self.check_common()
        try:
            self.check_family()
        except SettingError as e:
            if self.simulation is not None and e.field.split(".")[0] in self.simulation.settings:
                raise

    @classmethod
    def from_dict(cls: type[S], values: Mapping[str, Any]) -> S:
        """Validate untyped settings (None means the default); a stored row of an older version is read in today's
        names first (`upgrade`)."""
        values = cls.upgrade(values)
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

    @classmethod
    def upgrade(cls, values: Mapping[str, Any]) -> Mapping[str, Any]:
        """A family's settings renamed since a job was stored, in today's names (a job stored by an older version
        resumes as it began); none by default."""
        return values

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def problem(self) -> dict[str, Any]:
        """The dimensions an algorithm of this job is built with (besides its parameters)."""
        raise NotImplementedError

    def validate(self) -> None:
        """The common settings, then the family's (`check_family`), then the algorithm's parameters, then what
        the job would ask of the wire and of every agent (`check_resources`)."""
        self.check_common()
        self.check_family()
        cls = self.algorithms[self.algorithm]
        try:
            self.algorithm_params = check_params(cls, self.algorithm_params, **self.problem())
        except SettingError as e:
            raise e.within("algorithm_params") from None
        self.check_resources(self.make_algorithm())

    def check_resources(self, alg: Any) -> None:
        """A job no deployment could run is refused when it is created, not when its first round stalls: its round
        messages (the broadcast with the initial state) and uploads must fit a message (MAX_MESSAGE_BYTES), and a
        client step must fit an agent (MAX_CLIENT_BYTES). The setting named is the one that sizes the problem."""
        size = {"round message": 2 * alg.broadcast_bytes(), "upload": alg.upload_bytes()}
        for what, n in size.items():
            check(n <= MAX_MESSAGE_BYTES, self.sizing, f"the job's {what} would be {n / 2**20:.0f} MiB, more than a "
                  f"message may carry ({MAX_MESSAGE_BYTES // 2**20} MiB): choose a smaller {self.sizing}")
        need = alg.client_bytes()
        check(need <= MAX_CLIENT_BYTES, self.sizing, f"a client step would need about {need / 2**20:.0f} MiB on "
              f"every agent, more than an agent is given for it ({MAX_CLIENT_BYTES // 2**20} MiB): choose a smaller "
              f"{self.sizing}")

    @property
    def sizing(self) -> str:
        """The setting a family's problem size follows (named in a refusal of `check_resources`)."""
        return "rank"

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


def _without_none(hint: Any) -> Any:
    """`X | None` as X (other types as they are)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and len(typing.get_args(hint)) == 2 else hint


def default_algorithm_params(cls: type) -> str:
    """The keyword arguments an algorithm takes beyond the job's dimensions, with their defaults (as help shows
    them: "components default 64, reg default 0.0001, ...")."""
    import inspect

    dims = ("n_features", "rank", "n_items", "seed")
    shown = [f"{n} default {p.default}" for n, p in inspect.signature(cls).parameters.items()
             if p.default is not inspect.Parameter.empty and n not in dims]
    return f"{cls.__name__}: " + ", ".join(shown[:12]) if shown else cls.__name__
