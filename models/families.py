"""Job families as plug-ins: everything that makes a kind of job, in one registry entry.

A family names its typed settings (`JobSpec` subclass, which also holds its algorithm registry), the
coordinator's job runner, the agent's participant and, for a detector, its in-process simulation. All are given
as import paths (``module:Class``): each side loads only its own, so the agent never imports the coordinator and
the coordinator never imports the agent, and a family's settings and algorithms are imported when it is first
used (an agent that scores with a mixture never imports the PCA and recommendation algorithms: resident memory on
a device). Adding a family is a package under `models/` (algorithms and spec), a runner under `coordinator/`, a
participant under `edge_agent/`, and one entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from models.params import SettingError

if TYPE_CHECKING:
    from models.jobspec import JobSpec


@dataclass(frozen=True)
class JobFamily:
    name: str
    spec_path: str  # "package.module:Class" of its settings (JobSpec), which hold the algorithm registry
    runner: str  # "package.module:Class" of the coordinator's JobRunner
    participant: str  # "package.module:Class" of the agent's Participant
    summary: str = ""
    #: families that share a slot replace each other's promoted model (agents score with one anomaly model)
    model_slot: str = ""
    #: an anomaly detector: "package.module:Class" of what agents score with (its from_wire / from_dict read the
    #: published model); empty for other families
    detector: str = ""
    #: what an agent's participant is given: its training records ("records") or a ratings shard ("ratings");
    #: a family of recommendations ("ratings") is served by the API's recommendation routes
    data: str = "records"
    #: an anomaly detector's in-process simulation from `fedsentry simulate pca`'s settings: "package.module:function"
    #: called as (args, algorithm, data, split, parts, params, strict, **overrides) -> result (fedsentry.runs.detection
    #: .simulate); empty for a family that has none there (recommendation has its own command)
    simulator: str = ""

    @property
    def spec(self) -> type[JobSpec]:
        spec: type[JobSpec] = _load(self.spec_path)
        return spec

    @property
    def slot(self) -> str:
        return self.model_slot or self.name

    @property
    def algorithms(self) -> Mapping[str, type]:
        return self.spec.algorithms

    def load_runner(self) -> Any:
        return _load(self.runner)

    def load_participant(self) -> Any:
        return _load(self.participant)

    def load_detector(self) -> Any:
        return _load(self.detector)

    def load_simulator(self) -> Any:
        if not self.simulator:
            raise SettingError("detector", f"{self.name} has no in-process simulation")
        return _load(self.simulator)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


FAMILIES: dict[str, JobFamily] = {
    "pca": JobFamily("pca", "models.pca.spec:PCAJobSpec", "coordinator.pca_job:PCAJob",
                     "edge_agent.pca_participant:PCAParticipant",
                     "federated PCA anomaly detection: agents name the features they provide", "anomaly",
                     "models.pca.detector:PCADetector", simulator="fedsentry.runs.pca:pca_simulation"),
    "gmm": JobFamily("gmm", "models.mixture.spec:MixtureJobSpec", "coordinator.mixture_job:MixtureJob",
                     "edge_agent.mixture_participant:MixtureParticipant",
                     "federated Gaussian-mixture anomaly detection (FedMM on EM statistics): agents name the "
                     "features they provide", "anomaly", "models.mixture.detector:MixtureDetector",
                     simulator="fedsentry.runs.mixture:mixture_simulation"),
    "dict": JobFamily("dict", "models.dictionary.spec:DictionaryJobSpec", "coordinator.dictionary_job:DictionaryJob",
                      "edge_agent.dictionary_participant:DictionaryParticipant",
                      "federated dictionary learning (FedMM on the lasso codes' statistics): alerts name their atoms "
                      "and the features no atom reproduces", "anomaly", "models.dictionary.detector:DictionaryDetector",
                      simulator="fedsentry.runs.dictionary:dictionary_simulation"),
    "otmap": JobFamily("otmap", "models.otmap.spec:OTMapJobSpec", "coordinator.otmap_job:OTMapJob",
                       "edge_agent.otmap_participant:OTMapParticipant",
                       "a transport map (FedMM-OT) from the fleet's traffic onto the promoted mixture, applied before "
                       "scoring with it: a fleet whose traffic moved as a whole keeps its vetted detector", "anomaly",
                       "models.otmap.field:MappedDetector"),
    "recsys": JobFamily("recsys", "models.recsys.spec:RecsysJobSpec", "coordinator.recsys_job:RecsysJob",
                        "edge_agent.recsys_participant:RecsysParticipant",
                        "federated recommendation: agents hold ratings shards; the job names the item catalogue",
                        data="ratings"),
}

#: what agents and models that predate the choice of family meant: an agent that announced no job types takes
#: part in these, a published model that names no detector is this one
LEGACY_JOBS: Final = ("pca",)
LEGACY_DETECTOR: Final = "pca"


def register(f: JobFamily) -> None:
    """Add a family (a plug-in: its spec, runner and participant); its name must be new."""
    if f.name in FAMILIES:
        raise ValueError(f"a job family {f.name!r} exists already")
    FAMILIES[f.name] = f


def unregister(name: str) -> None:
    FAMILIES.pop(name, None)


def detectors() -> list[str]:
    """The anomaly-detection families (the ones `--detector` chooses between), the default first."""
    return sorted((n for n, f in FAMILIES.items() if f.detector), key=lambda n: (n != DEFAULT_DETECTOR, n))


def families_with(data: str) -> list[str]:
    """The families whose agents take part with this data ("records" or "ratings")."""
    return [n for n, f in FAMILIES.items() if f.data == data]


def simulated(data: str) -> list[str]:
    """The families of this data ("records" or "ratings") that have an in-process simulator (`fedsentry simulate`:
    their spec's `simulation` says what it takes; a detector's registry entry names it, `simulator`), the default
    detector first."""
    return sorted((n for n in families_with(data) if FAMILIES[n].spec.simulation is not None
                   and (FAMILIES[n].simulator or not FAMILIES[n].detector)),
                  key=lambda n: (n != DEFAULT_DETECTOR, n))


#: the detector family every entry point trains unless told otherwise (job create, the REST body, simulate, bench,
#: demo): the Gaussian mixture catches far more attacks on real IoT traffic than linear PCA (README)
DEFAULT_DETECTOR: Final = "gmm"
#: the anomaly-detection families (the ones `--detector` chooses between)
DETECTORS = tuple(detectors())


def spec_default(type_: str, name: str) -> Any:
    """A setting's default as the family's typed spec defines it: what `--help`, the OpenAPI schema and the README
    show, so that no surface states its own number."""
    from dataclasses import MISSING, fields

    spec = family(type_).spec
    f = next((f for f in fields(spec) if f.name == name), None)
    if f is None:
        raise KeyError(f"{type_} jobs have no setting {name!r}")
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def algorithm_default(type_: str, name: str, algorithm: str | None = None) -> Any:
    """An algorithm parameter's default (its constructor's), for the family's default algorithm unless named."""
    import inspect

    spec = family(type_).spec
    cls = spec.algorithms[algorithm or spec.default_algorithm()]
    return inspect.signature(cls).parameters[name].default


def family_for(type_: str | None, algorithm: str | None) -> str:
    """The family a job means: the one named, else the one whose registry holds the algorithm named (a job that
    names `fedpg` is a PCA job), else the default detector."""
    if type_:
        return type_
    owners = [name for name, f in FAMILIES.items() if algorithm and algorithm in f.algorithms]
    return owners[0] if len(owners) == 1 else DEFAULT_DETECTOR


def family(name: str) -> JobFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise SettingError("type", f"unknown job type {name!r}; choose from {', '.join(FAMILIES)}") from None


def job_spec(type_: str, values: Mapping[str, Any]) -> JobSpec:
    """A job's validated settings from untyped values (an API body, a stored row, CLI flags)."""
    return family(type_).spec.from_dict(values)
