"""The settings of a federated transport-map job (issue 26, point 5): one map, learnt by FedMM-OT over the fleet's
records, onto samples of the promoted mixture (Q), applied before scoring with that mixture (models.otmap.field).
The map's network and steps are the algorithm's parameters (``algorithm_params.hidden``, ``lr``, ``gamma``,
``alpha``, ``server_steps``, ``server_lr``, ``batch``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from models.detection.spec import DetectorJobSpec
from models.jobspec import SettingError, check, setting
from models.otmap.fedmm import ALGORITHMS
from models.otmap.fleet import STARTS


@dataclass
class OTMapJobSpec(DetectorJobSpec):
    algorithms: ClassVar = ALGORITHMS
    family: ClassVar[str] = "otmap"

    #: how many samples of the promoted mixture the server holds as Q (drawn from the job's seed)
    target_records: int = setting(4096, help="samples of the promoted mixture the server holds as the target Q")
    #: where the map starts (models.otmap.fleet.STARTS)
    start: str = setting("quantile", help="where the map starts: quantile (the per-feature monotone map from the "
                         "fleet's summed histograms onto the target's quantiles, a histogram phase after the "
                         "statistics), moments (the per-feature affine map matching the fleet's means and variances "
                         "with the target's) or none")

    @classmethod
    def upgrade(cls, values: Mapping[str, Any]) -> Mapping[str, Any]:
        """A job stored before `start` had the boolean `moments` (true: the affine start, false: none); it resumes
        with the start it began with (not the quantile start, whose histogram phase it never ran)."""
        if "moments" not in values:
            return values
        out = dict(values)
        moments = out.pop("moments")
        if out.get("start") is not None:
            raise SettingError("moments", "is the older name of start: give one of them")
        out["start"] = "none" if moments in (False, "false", "False", 0) else "moments"
        return out

    def check_family(self) -> None:
        super().check_family()
        check(self.start in STARTS, "start", f"must be one of {', '.join(STARTS)}, got {self.start!r}")
        check(16 <= self.target_records <= 1_000_000, "target_records", "must be between 16 and 10^6")

    def check_private(self) -> None:
        check(not self.private, "private", "a transport-map job is not run in private mode: FedMM-OT's server keeps "
              "each device's own gradient (its control variate), which sums alone do not give; leave private off")

    def problem(self) -> dict[str, int]:
        return {"n_features": len(self.features)}
