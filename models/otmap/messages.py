"""The otmap family's round message (coordinator.otmap_job, edge_agent.otmap_participant)."""

from __future__ import annotations

from dataclasses import dataclass

from models.detection.messages import DetectorRound

#: how an agent's decline begins when a round names a start map it does not hold (the coordinator then sends the
#: map again, in the next round's `init`)
NO_START = "no start map"


@dataclass(kw_only=True)
class OTMapRound(DetectorRound):
    """Plus, in the training rounds of a job with the quantile start, the digest of its start map
    (models.otmap.quantile.QuantileMap.digest). The map itself travels once: in the `init` of the first training
    round (and of the round after one in which a device declined for lacking it); every agent keeps it, sampled or
    not, and applies the map whose digest the round names."""

    start: str | None = None
