"""Pydantic schemas of the wire, separate from the tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from models.pca import FEDERATED
from models.recsys import FEDERATED as RECSYS
from wire.protocol import ID_RE

ID_PATTERN = ID_RE.pattern


class JobCreate(BaseModel):
    """A training job. `pca` jobs name the features the agents provide; `recsys` jobs the item catalogue."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["pca", "recsys"] = "pca"
    id: str | None = Field(None, pattern=ID_PATTERN, description="job id (generated when absent)")
    features: list[str] | None = Field(None, min_length=2, max_length=1000,
                                       description="pca: feature names the agents provide")
    items: list[int | str] | None = Field(None, min_length=2, max_length=1_000_000,
                                          description="recsys: the item catalogue (ids)")
    algorithm: str | None = Field(None, description="default fedmm (pca) or fedmc-admm (recsys)")
    rank: int | None = Field(None, ge=1, le=1000, description="default 3 (pca) or 10 (recsys)")
    rounds: int = Field(30, ge=1, le=100_000)
    fraction: float = Field(0.3, gt=0, le=1)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    quantile: float = Field(0.99, gt=0, lt=1, description="pca: threshold quantile")
    min_agents: int = Field(1, ge=1, le=1_000_000)
    deadline: float = Field(10.0, gt=0, le=3600, description="seconds to wait for a round's uploads")
    rating_min: float = Field(0.5, description="recsys: lowest valid rating")
    rating_max: float = Field(5.0, description="recsys: highest valid rating")

    @field_validator("features")
    @classmethod
    def _distinct(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (len(set(v)) != len(v) or not all(0 < len(f) <= 128 for f in v)):
            raise ValueError("features must be distinct non-empty names of at most 128 characters")
        return v

    @field_validator("items")
    @classmethod
    def _catalogue(cls, v: list | None) -> list | None:
        if v is not None and len({str(i) for i in v}) != len(v):
            raise ValueError("item ids must be distinct")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> JobCreate:
        def bad(field: str, problem: str):
            raise PydanticCustomError("job", "{field}: {problem}", {"field": field, "problem": problem})

        if self.type == "pca":
            self.algorithm = self.algorithm or "fedmm"
            self.rank = self.rank or 3
            if self.features is None:
                bad("features", "a pca job needs the feature names its agents provide")
            if self.items is not None:
                bad("items", "an item catalogue belongs to a recsys job")
            if self.algorithm not in FEDERATED:
                bad("algorithm", f"must be one of {', '.join(sorted(FEDERATED))} for a pca job")
            if self.rank >= len(self.features):
                bad("rank", f"({self.rank}) must be smaller than the number of features ({len(self.features)})")
        else:
            self.algorithm = self.algorithm or "fedmc-admm"
            self.rank = self.rank or 10
            if self.items is None:
                bad("items", "a recsys job needs the item catalogue")
            if self.features is not None:
                bad("features", "features belong to a pca job")
            if self.algorithm not in RECSYS:
                bad("algorithm", f"must be one of {', '.join(sorted(RECSYS))} for a recsys job")
            if self.rank >= len(self.items):
                bad("rank", f"({self.rank}) must be smaller than the number of items ({len(self.items)})")
            if not self.rating_min < self.rating_max:
                bad("rating_min", "must be below rating_max")
        return self


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
    score: float
    threshold: float
    count: int
    acknowledged: bool
    acknowledged_at: datetime | None
    explanation: list[dict[str, Any]]


class DeviceOut(BaseModel):
    id: str
    online: bool
    first_seen: datetime
    last_seen: datetime
    rounds: int
    alerts: int


class ModelOut(BaseModel):
    id: int
    job_id: str
    version: int
    type: str
    round: int
    promoted: bool
    published: bool
    created: datetime
    features: list[str]
    threshold: float
    Z: list[list[float]] | None = None


class RecommendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ratings: dict[str, float] = Field(..., min_length=1, max_length=10_000,
                                      description="the new user's ratings: item id -> rating")
    n: int = Field(10, ge=1, le=1000)
