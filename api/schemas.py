"""Pydantic schemas of the wire, separate from the tables."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from api.validation import ALERT_ID_PATTERN, ItemId, Name, Note, Scalar
from models.families import DEFAULT_DETECTOR, algorithm_default, family, family_for, job_spec, spec_default
from models.jobspec import JobSpec
from models.params import SettingError
from models.pca import FEDERATED as PCA_ALGORITHMS
from models.recsys import FEDERATED as RECSYS
from wire.protocol import ID_RE

ID_PATTERN = ID_RE.pattern


class JobCreate(BaseModel):
    """A training job. `pca` and `gmm` (Gaussian mixture) jobs name the features the agents provide; `recsys`
    jobs the item catalogue.

    The settings are the job family's typed spec (`models.families`), the same the command line and the
    demo use: an unknown setting, or an algorithm parameter the chosen algorithm does not take, is an error.
    Numbers must be finite, integers fit in 64 bits, names are printable text."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: Literal["pca", "gmm", "recsys"] = Field(
        DEFAULT_DETECTOR, description=f"the job family: gmm (Gaussian mixture, the recommended detector), pca "
        f"(federated PCA, the paper's) or recsys (recommendation); default {DEFAULT_DETECTOR}")
    detector: Literal["pca", "gmm"] | None = Field(None, description="the same choice as `type` for an anomaly "
                                                   "detection job, by the command line's name (--detector)")
    id: str | None = Field(None, pattern=ID_PATTERN, description="job id (generated when absent)")
    features: list[Name] | None = Field(None, min_length=2, max_length=1000,
                                       description="pca: feature names the agents provide")
    categorical: list[Name] | None = Field(None, max_length=16, description="pca, gmm: text fields one-hot encoded "
                                           "with a vocabulary the devices agree (e.g. proto, service, conn_state)")
    flags: list[Name] | None = Field(None, max_length=16, description="pca, gmm: flag-string fields whose letters "
                                     "become columns (e.g. Zeek's history)")
    items: list[ItemId] | None = Field(None, min_length=2, max_length=1_000_000,
                                          description="recsys: the item catalogue (ids)")
    algorithm: Name | None = Field(None, description=f"gmm: fedem; pca: one of {', '.join(PCA_ALGORITHMS)} (default "
                                   f"{family('pca').spec.default_algorithm()}); recsys: one of {', '.join(RECSYS)} "
                                   f"(default {family('recsys').spec.default_algorithm()})")
    algorithm_params: dict[Name, Scalar] | None = Field(
        None, max_length=32, description="the algorithm's parameters (e.g. rho, local_steps, oversample, bits, "
                                         "aggregator, lam, gamma, regularizer; gmm: components, reg (default "
                                         f"{algorithm_default('gmm', 'reg')})): its constructor's keyword arguments")
    rank: int | None = Field(None, ge=1, le=1000, description="default 3 (pca) or 10 (recsys)")
    rounds: int | None = Field(None, ge=1, le=100_000,
                               description=f"training rounds (default {spec_default('gmm', 'rounds')})")
    fraction: float | None = Field(None, gt=0, le=1, description="share of agents sampled per round (default "
                                   f"{spec_default('gmm', 'fraction')})")
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    quantile: float | None = Field(None, gt=0, lt=1, description="gmm, pca: threshold quantile (default "
                                   f"{spec_default('gmm', 'quantile')} for gmm, {spec_default('pca', 'quantile')} "
                                   "for pca)")
    holdout: float | None = Field(None, ge=0.05, le=0.5, description="gmm: share of each device's records held "
                                  f"out of training for the threshold (default {spec_default('gmm', 'holdout')})")
    log_transform: bool | None = Field(None, description="pca: signed log1p before standardising (default true)")
    min_agents: int | None = Field(None, ge=1, le=1_000_000, description="wait until this many agents are online")
    max_agents: int | None = Field(None, ge=1, le=1_000_000, description="take part with at most this many agents")
    deadline: float | None = Field(None, gt=0, le=3600, description="seconds to wait for a round's uploads")
    rating_min: float | None = Field(None, ge=-1e9, le=1e9, description="recsys: lowest valid rating (default 0.5)")
    rating_max: float | None = Field(None, ge=-1e9, le=1e9, description="recsys: highest valid rating (default 5)")
    kernel: str | None = Field(None, description="pca: rff for kernel PCA through random Fourier features "
                                                 "(default none)")
    kernel_features: int | None = Field(None, description="pca, rff: number of random Fourier features (default 1000)")
    kernel_gamma: float | None = Field(None, description="pca, rff: Gaussian kernel width (default 1/(2 x features))")
    # how far one device is trusted (pca; checked by the job's settings, models.detection.screening)
    max_records: int | None = Field(None, description="pca: refuse a device claiming more records (default 10^6)")
    count_cap: float | None = Field(None, description="pca: cap counts at this multiple of the median (default 2)")
    max_share: float | None = Field(None, description="pca: no device weighs more than this share (default 0.1)")
    influence: float | None = Field(None, description="pca: one device raises a feature's pooled variance by at "
                                                      "most 1 + this factor (default 3)")
    device_trim: float | None = Field(None, description="pca: share of the devices' error quantiles left out on "
                                                        "either side of the threshold (default 0.1)")

    def spec(self) -> JobSpec:
        """The validated typed settings; a PydanticCustomError naming the field otherwise."""
        if self.detector is not None:
            if "type" in self.model_fields_set and self.type != self.detector:
                _bad("detector", f"{self.detector!r} and type {self.type!r} disagree: give one of them")
            self.type = self.detector
        elif "type" not in self.model_fields_set:  # a job that names fedpg is a pca job
            self.type = family_for(None, self.algorithm)  # type: ignore[assignment]
        try:
            return job_spec(self.type, self.model_dump(exclude={"type", "id", "detector"}, exclude_none=True))
        except SettingError as e:
            _bad(e.field.split("[")[0] or "algorithm_params", e.problem)
            raise

    @model_validator(mode="after")
    def _consistent(self) -> JobCreate:
        self.spec()
        return self


def _bad(field: str, problem: str) -> None:
    raise PydanticCustomError("job", "{field}: {problem}", {"field": field, "problem": problem})


class RoundOut(BaseModel):
    round: int
    phase: str
    sampled: int
    answered: int
    seconds: float
    metrics: dict[str, Any]


class JobOut(BaseModel):
    id: str
    type: str
    algorithm: str
    status: str
    phase: str
    current_round: int
    params: dict[str, Any]
    error: str | None
    created: datetime
    updated: datetime


class JobDetail(JobOut):
    rounds: list[RoundOut]


class InfluenceOut(BaseModel):
    device: str
    refused: int = Field(description="rounds whose answer from this device was refused")
    capped: int = Field(description="rounds in which its weight or upload was capped")
    kept_out: int = Field(description="rounds in which components only it (or too few devices) supports were kept "
                                      "out of the shared model")
    rounds_affected: int
    rounds_answered: int
    last_round: int
    reasons: dict[str, str] = Field(description="the latest reason of each kind")
    flagged: bool = Field(description="refused, capped or kept out repeatedly: at least 3 rounds, and more than "
                                      "half of those it answered")


class Page(BaseModel):
    items: list[Any]
    next_cursor: str | None = None


class AnomalyOut(BaseModel):
    id: str
    device_id: str
    job_id: str
    model_version: int
    ts: datetime
    received: datetime
    score: float | None = Field(description="null when the stored score is not a finite number")
    threshold: float | None = Field(description="null when the stored threshold is not a finite number")
    count: int
    acknowledged: bool
    acknowledged_at: datetime | None
    acknowledged_by: str | None = Field(None, description="the name (else the id) of the API key that acknowledged")
    ack_note: str | None = Field(None, description="the note given with the acknowledgement")
    explanation: list[dict[str, Any]]
    flow: dict[str, Any] | None = Field(None, description="the record's connection: Zeek's uid, ts, id.orig_h, "
                                        "id.orig_p, id.resp_h, id.resp_p, proto, service; a CSV's line number (row)")
    incident: dict[str, Any] | None = Field(None, description="an incident update: key (the explaining features), "
                                            "window, first, last, samples; `count` is its new flagged records")
    incident_id: str | None = Field(None, description="the incident the update belongs to (/api/v1/incidents/{id})")


class IncidentOut(BaseModel):
    id: str = Field(description="the incident's id: its updates are /api/v1/anomalies?incident={id}")
    device_id: str
    job_id: str
    key: str = Field(description="the features that explain the incident's records, joined by +")
    features: list[str]
    window: datetime | None = Field(description="start of the device's rate-limit window the incident belongs to")
    count: int = Field(description="flagged records in the incident")
    updates: int = Field(description="incident updates the device sent (one a second while it grows)")
    first: datetime = Field(description="the first flagged record seen")
    last: datetime = Field(description="the last flagged record seen")
    last_update: datetime = Field(description="time of the newest update")
    max_score: float | None
    samples: list[dict[str, Any]] = Field(description="example flows (uid, addresses, ports, ...)")
    acknowledged: bool = Field(description="every update acknowledged (a later update opens the incident again)")
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None
    ack_note: str | None = None


class AckBody(BaseModel):
    """An acknowledgement: the note says why (false positive, ticket number, ...)."""

    model_config = ConfigDict(extra="forbid")

    note: Note | None = None


class BulkIds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[str, StringConstraints(pattern=ALERT_ID_PATTERN)]] = Field(
        ..., min_length=1, max_length=1000, description="the alerts' ids")


class BulkAck(BulkIds):
    note: Note | None = None


class AckResult(BaseModel):
    changed: int = Field(description="alerts whose acknowledgement changed (the others were so already or unknown)")


class CountPoint(BaseModel):
    start: datetime
    records: int


class CountsOut(BaseModel):
    since: datetime
    until: datetime
    alerts: int = Field(description="stored alerts (individual alerts and incident updates)")
    records: int = Field(description="flagged records they stand for (an incident update counts all of its own)")
    unacknowledged_records: int
    incidents: int
    devices: int
    bucket_seconds: int
    series: list[CountPoint] = Field(description="flagged records per time bucket, oldest first")


class DeviceOut(BaseModel):
    id: str
    online: bool
    first_seen: datetime
    last_seen: datetime
    rounds: int
    alerts: int
    model_status: dict[str, Any] | None = Field(None, description="the device's model as it reports it: job, version, "
                                                "status (loaded, scoring, refused) and, when refused, why")


class ModelOut(BaseModel):
    id: int
    job_id: str
    version: int
    type: str
    round: int
    promoted: bool
    published: bool
    created: datetime
    info: dict[str, Any] = Field(description="what the job family stores with the version: pca: features and "
                                             "threshold; recsys: items, mean, rating bounds, lam, test RMSE")
    features: list[Name] | None = Field(None, description="pca: the features the model scores")
    threshold: float | None = Field(None, description="pca: the label-free alert threshold")
    arrays: dict[str, list[Any]] | None = Field(None, description="with ?matrix=true: the model's arrays (pca: "
                                                                  "Z, mean, scale; recsys: item_factors)")
    Z: list[list[float]] | None = Field(None, description="pca, with ?matrix=true: the subspace (d x k)")


class RecommendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    ratings: dict[Name, float] = Field(..., min_length=1, max_length=10_000,
                                      description="the new user's ratings: item id -> rating")
    n: int = Field(10, ge=1, le=1000)
