"""The settings of a federated recommendation job."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from models.jobspec import JobSpec, Simulation, check, setting
from models.recsys import ALGORITHMS, FEDERATED
from models.recsys.base import REGULARIZERS
from models.recsys.fedmc_admm import USER_ITEMS, USER_SOLVERS


@dataclass
class RecsysJobSpec(JobSpec):
    algorithms: ClassVar = FEDERATED
    family: ClassVar[str] = "recsys"
    required: ClassVar[dict[str, str]] = {"items": "the item catalogue"}
    # the ratings and their scale are the simulation's data (its --ratings, --rating-min, --rating-max flags)
    simulation: ClassVar = Simulation(
        settings=("rank", "rounds", "fraction", "seed", "private"), algorithms=ALGORITHMS,
        choices={"regularizer": REGULARIZERS, "user_solver": USER_SOLVERS, "user_items": USER_ITEMS},
        parameters={"regularizer": "the penalty on the factors", "rho": "ADMM penalty, the paper's beta",
                    "lam": "ridge weight of user factors (fedmc-admm: none, by the regularizer)",
                    "gamma": "ridge weight of item factors (fedmc-admm: none, by the regularizer)",
                    "local_steps": "local steps per round",
                    "user_solver": "exact ridge per user, or the paper's proximal steps (66)",
                    "user_items": "fit the user rows against the item factors received this round (consensus) or "
                    "the client's own copy (copy, the paper's (66))",
                    "lr": "multiplier of the paper's step size"})

    rank: int = setting(10, help="latent factors")
    items: list[int | str] = setting(factory=list, help="the item catalogue (ids)")
    rating_min: float = setting(0.5, help="lowest valid rating")
    rating_max: float = setting(5.0, help="highest valid rating")
    private: bool = setting(False, help="private mode: the server step receives only the secure sum of each round's "
                            "item rows (SecAgg+; every federated algorithm)")

    def problem(self) -> dict[str, int]:
        return {"n_items": len(self.items), "rank": self.rank}

    def validate(self) -> None:
        super().validate()
        # a job over MQTT sums every round's uploads (coordinator.private_recsys): an algorithm must have summable ones
        check(not self.private or bool(self.make_algorithm().summed), "private",
              f"private mode sums each round's uploads; {self.algorithm} has no summable uploads (an algorithm names "
              "them in its `summed`)")

    def check_family(self) -> None:
        check(2 <= len(self.items) <= 1_000_000, "items", "a recsys job needs an item catalogue of 2 to 1000000 ids")
        check(len({str(i) for i in self.items}) == len(self.items), "items", "item ids must be distinct")
        check(self.rank < len(self.items), "rank",
              f"({self.rank}) must be smaller than the number of items ({len(self.items)})")
        check(math.isfinite(self.rating_min) and math.isfinite(self.rating_max), "rating_min",
              "rating bounds must be finite")
        check(self.rating_min < self.rating_max, "rating_min", "must be below rating_max")
