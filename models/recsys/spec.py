"""The settings of a federated recommendation job."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from models.jobspec import JobSpec, check
from models.recsys import FEDERATED


@dataclass
class RecsysJobSpec(JobSpec):
    algorithms: ClassVar = FEDERATED
    family: ClassVar[str] = "recsys"
    required: ClassVar[dict[str, str]] = {"items": "the item catalogue"}

    rank: int = 10
    items: list[int | str] = field(default_factory=list)
    rating_min: float = 0.5
    rating_max: float = 5.0

    def problem(self) -> dict[str, int]:
        return {"n_items": len(self.items), "rank": self.rank}

    def check_family(self) -> None:
        check(2 <= len(self.items) <= 1_000_000, "items", "a recsys job needs an item catalogue of 2 to 1000000 ids")
        check(len({str(i) for i in self.items}) == len(self.items), "items", "item ids must be distinct")
        check(self.rank < len(self.items), "rank",
              f"({self.rank}) must be smaller than the number of items ({len(self.items)})")
        check(math.isfinite(self.rating_min) and math.isfinite(self.rating_max), "rating_min",
              "rating bounds must be finite")
        check(self.rating_min < self.rating_max, "rating_min", "must be below rating_max")
