"""Pydantic schemas of the wire, separate from the tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from edge_agent.protocol import ID_RE
from models.pca import FEDERATED

ID_PATTERN = ID_RE.pattern


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["pca", "recsys"] = "pca"
    id: str | None = Field(None, pattern=ID_PATTERN, description="job id (generated when absent)")
    features: list[str] = Field(..., min_length=2, max_length=1000, description="feature names the agents provide")
    algorithm: str = "fedmm"
    rank: int = Field(3, ge=1, le=1000)
    rounds: int = Field(30, ge=1, le=100_000)
    fraction: float = Field(0.3, gt=0, le=1)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    quantile: float = Field(0.99, gt=0, lt=1)
    min_agents: int = Field(1, ge=1, le=1_000_000)
    deadline: float = Field(10.0, gt=0, le=3600, description="seconds to wait for a round's uploads")

    @field_validator("type")
    @classmethod
    def _supported(cls, v: str) -> str:
        if v == "recsys":
            raise ValueError("recsys jobs run through `fedsentry demo --job recsys`; they cannot be created through "
                             "this API yet")
        return v

    @field_validator("features")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v) or not all(0 < len(f) <= 128 for f in v):
            raise ValueError("features must be distinct non-empty names of at most 128 characters")
        return v

    @field_validator("algorithm")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in FEDERATED:
            raise ValueError(f"algorithm must be one of {', '.join(sorted(FEDERATED))} for a pca job")
        return v

    @field_validator("rank")
    @classmethod
    def _rank(cls, v: int, info: ValidationInfo) -> int:
        features = info.data.get("features")
        if features and v >= len(features):
            raise ValueError(f"rank ({v}) must be smaller than the number of features ({len(features)})")
        return v


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

    ratings: dict[str, float] = Field(..., min_length=1, max_length=10_000, description="item id -> rating")
    n: int = Field(10, ge=1, le=1000)
