"""The settings of a federated PCA job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from models.jobspec import JobSpec, check
from models.pca import FEDERATED


@dataclass
class PCAJobSpec(JobSpec):
    algorithms: ClassVar = FEDERATED
    family: ClassVar[str] = "pca"
    required: ClassVar[dict[str, str]] = {"features": "the feature names its agents provide"}

    features: list[str] = field(default_factory=list)
    quantile: float = 0.99
    log_transform: bool = True

    @classmethod
    def default_algorithm(cls) -> str:
        return "fedmm"

    def problem(self) -> dict[str, int]:
        return {"n_features": len(self.features), "rank": self.rank}

    def check_family(self) -> None:
        check(2 <= len(self.features) <= 1000, "features", "a pca job needs 2 to 1000 feature names its agents provide")
        check(len(set(self.features)) == len(self.features) and all(0 < len(f) <= 128 for f in self.features),
              "features", "must be distinct non-empty names of at most 128 characters")
        check(self.rank < len(self.features), "rank",
              f"({self.rank}) must be smaller than the number of features ({len(self.features)})")
        check(0 < self.quantile < 1, "quantile", "must be in (0, 1)")
