"""The settings of a federated PCA job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.detection import DetectorJobSpec
from models.jobspec import check
from models.pca import FEDERATED


@dataclass
class PCAJobSpec(DetectorJobSpec):
    algorithms: ClassVar = FEDERATED
    family: ClassVar[str] = "pca"

    @classmethod
    def default_algorithm(cls) -> str:
        return "fedmm"

    def problem(self) -> dict[str, int]:
        return {"n_features": len(self.features), "rank": self.rank}

    def check_family(self) -> None:
        super().check_family()
        check(self.rank < len(self.features), "rank",
              f"({self.rank}) must be smaller than the number of features ({len(self.features)})")
