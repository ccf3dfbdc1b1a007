"""The models side of the plug-in family: its typed settings and its federated algorithm."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from models.core.federated import FederatedAlgorithm, State
from models.core.messages import Message, RoundMessage, array
from models.jobspec import JobSpec, check, setting


class FedMean(FederatedAlgorithm):
    """Each sampled device uploads the sum and count of its records; the server keeps running totals per
    device (its latest answer) and broadcasts the weighted mean."""

    name = "fedmean"

    def __init__(self, n_features: int, rank: int = 1, shrink: float = 0.0):
        self.n_features, self.shrink = n_features, shrink

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        server = {"sums": np.zeros((n_clients, self.n_features)), "counts": np.zeros(n_clients)}
        return server, {"mean": np.zeros(self.n_features)}

    def init_clients(self, data: State, broadcast: State) -> State:
        return {"answered": np.zeros(len(data["X"]))}

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        X = data["X"]
        return {"answered": state["answered"] + 1}, {"sum": X.sum(axis=1), "count": np.full(len(X), X.shape[1])}

    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        server["sums"][client_ids] = uploads["sum"]
        server["counts"][client_ids] = uploads["count"]
        total = max(float(server["counts"].sum()), 1.0)
        return server, {"mean": (1 - self.shrink) * server["sums"].sum(axis=0) / total}


@dataclass(kw_only=True)
class MeanRound(RoundMessage):
    """The family's round message: the features to average."""

    features: list[str]


@dataclass(kw_only=True)
class RecordCount(Message):
    """A device's answer to the statistics phase: how many records it holds."""

    kind: ClassVar[str] = "stats"
    count: np.ndarray = array(kinds="fiu")


@dataclass
class MeanJobSpec(JobSpec):
    algorithms: ClassVar = {"fedmean": FedMean}
    family: ClassVar[str] = "fleetmean"
    required: ClassVar[dict[str, str]] = {"features": "the features to average"}

    rank: int = 1
    rounds: int = setting(3, help="averaging rounds")
    features: list[str] = setting(factory=list, help="numeric features to average")

    def problem(self) -> dict[str, int]:
        return {"n_features": len(self.features)}

    def check_family(self) -> None:
        check(1 <= len(self.features) <= 100, "features", "1 to 100 feature names")
