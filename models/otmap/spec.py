"""The settings of a federated transport-map job (issue 26, point 5): one map, learnt by FedMM-OT over the fleet's
records, onto samples of the promoted mixture (Q), applied before scoring with that mixture (models.otmap.field).
The map's network and steps are the algorithm's parameters (``algorithm_params.hidden``, ``lr``, ``gamma``,
``alpha``, ``server_steps``, ``server_lr``, ``batch``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.detection.spec import DetectorJobSpec
from models.jobspec import check, setting
from models.otmap.fedmm import ALGORITHMS


@dataclass
class OTMapJobSpec(DetectorJobSpec):
    algorithms: ClassVar = ALGORITHMS
    family: ClassVar[str] = "otmap"

    #: how many samples of the promoted mixture the server holds as Q (drawn from the job's seed)
    target_records: int = setting(4096, help="samples of the promoted mixture the server holds as the target Q")
    #: start both maps at the per-feature affine map matching the fleet's means and variances with Q's
    moments: bool = setting(True, help="start the map at the per-feature affine map matching the fleet's means and "
                            "variances (from its statistics phase) with the target's")

    def check_family(self) -> None:
        super().check_family()
        check(16 <= self.target_records <= 1_000_000, "target_records", "must be between 16 and 10^6")

    def problem(self) -> dict[str, int]:
        return {"n_features": len(self.features)}
