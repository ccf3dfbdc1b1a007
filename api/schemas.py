"""Pydantic schemas of the wire, separate from the tables."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.validation import ALERT_ID_PATTERN, Name, Note, UtcTime
from wire.protocol import ID_RE

ID_PATTERN = ID_RE.pattern


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
    created: UtcTime
    updated: UtcTime


class JobDetail(JobOut):
    rounds: list[RoundOut]
    dp: dict[str, Any] | None = Field(None, description="differential privacy: the budget the job's model spent "
                                      "(epsilon, delta, noise multiplier, clip norms; as `fedsentry simulate`'s "
                                      "JSON `dp`), None without it or before the model")


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
    ts: UtcTime
    received: UtcTime
    score: float | None = Field(description="null when the stored score is not a finite number")
    threshold: float | None = Field(description="null when the stored threshold is not a finite number")
    count: int
    acknowledged: bool
    acknowledged_at: UtcTime | None
    acknowledged_by: str | None = Field(None, description="the name (else the id) of the API key that acknowledged")
    ack_note: str | None = Field(None, description="the note given with the acknowledgement")
    explanation: list[dict[str, Any]]
    flow: dict[str, Any] | None = Field(None, description="the record's connection: Zeek's uid, ts, id.orig_h, "
                                        "id.orig_p, id.resp_h, id.resp_p, proto, service; a CSV's line number (row)")
    incident: dict[str, Any] | None = Field(None, description="an incident update: key (the explaining features), "
                                            "window, first, last, samples; `count` is its new flagged records")
    incident_id: str | None = Field(None, description="the incident the update belongs to (/api/v1/incidents/{id})")


class RecordOut(BaseModel):
    """A flagged record kept whole (past its device's alert budget: counted in an incident update)."""

    id: str
    alert_id: str = Field(description="the incident update that carried it (/api/v1/anomalies/{id})")
    device_id: str
    incident_id: str | None
    ts: UtcTime
    score: float
    threshold: float
    explanation: list[dict[str, Any]]
    flow: dict[str, Any] | None = Field(None, description="the record's connection, as in an anomaly")


class IncidentOut(BaseModel):
    id: str = Field(description="the incident's id: its updates are /api/v1/anomalies?incident={id}")
    device_id: str
    job_id: str
    key: str = Field(description="the features that explain the incident's records, joined by +")
    features: list[str]
    window: UtcTime | None = Field(description="start of the device's rate-limit window the incident belongs to")
    count: int = Field(description="flagged records in the incident")
    updates: int = Field(description="incident updates the device sent (one a second while it grows)")
    first: UtcTime = Field(description="the first flagged record seen")
    last: UtcTime = Field(description="the last flagged record seen")
    last_update: UtcTime = Field(description="time of the newest update")
    max_score: float | None
    samples: list[dict[str, Any]] = Field(description="example flows (uid, addresses, ports, ...)")
    acknowledged: bool = Field(description="every update acknowledged (a later update opens the incident again)")
    acknowledged_at: UtcTime | None = None
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
    start: UtcTime
    records: int


class CountsOut(BaseModel):
    since: UtcTime
    until: UtcTime
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
    first_seen: UtcTime
    last_seen: UtcTime
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
    created: UtcTime
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
