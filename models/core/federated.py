"""The contract every federated algorithm follows: a pure client step and a pure server step.

State, client data and messages are plain dicts of numpy arrays, so the in-process simulator, the MQTT
agent and the coordinator all drive the same functions (and can persist what they hold). Client-side
functions take *batched* arrays: every array carries a leading axis over clients (length 1 on a
device, the sampled clients in the simulator), so one call does the work of a whole round.

Problem dimensions (number of features, items, ...) and hyper-parameters are given to the
constructor; the methods never see more than the arrays they work on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

State = dict[str, np.ndarray]


@dataclass(frozen=True)
class SupportView:
    """What the pipeline's support rule (models.core.pipeline.support_mask) needs of a model made of units (a
    mixture's components): how many devices support each unit, how many devices the counts cover, the job's
    `min_support` and `mass_cap`, and the share of each unit's mass its m heaviest devices hold (None: no mass
    share)."""

    support: np.ndarray
    devices: int
    min_support: int
    mass_cap: float = 1.0
    heaviest: Callable[[int], np.ndarray] | None = None


class FederatedAlgorithm(ABC):
    """A federated algorithm as a Strategy: hyper-parameters in __init__, pure steps below."""

    name: str = ""
    #: server-state arrays whose length grows with the federation (one row per client, or per client
    #: seen): a round changes only a few rows, which `touched` names, so the coordinator stores just those
    row_tables: tuple[str, ...] = ()
    #: attacks its uploads make meaningless -> why, "{algorithm}" standing for its name
    #: (models.detection.attacks.not_applicable)
    not_attacked: ClassVar[dict[str, str]] = {}

    @abstractmethod
    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        """Return (server_state, first_broadcast)."""

    @abstractmethod
    def init_clients(self, data: State, broadcast: State) -> State:
        """Initial state of a batch of clients holding `data` (batched arrays)."""

    @abstractmethod
    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        """Local work of the sampled clients on the current broadcast: (new state, uploads)."""

    def client_finish(self, state: State, broadcast: State) -> State:
        """Called once with the broadcast that follows a round a client took part in (dual updates)."""
        return state

    @abstractmethod
    def server_update(
        self, server: State, client_ids: np.ndarray, uploads: State, weight: np.ndarray
    ) -> tuple[State, State]:
        """Aggregate the uploads of the clients that answered: (new server state, next broadcast).

        The server state is handed over: an implementation may update it in place (FedMM does, so a
        round costs what the sampled clients cost, whatever the size of the federation).

        client_ids and weight (the clients' shares of the data) are aligned with the uploads' first axis;
        clients that were sampled but did not answer are simply absent."""

    def screen(self, server: State, client_ids: np.ndarray, uploads: State) -> np.ndarray | None:
        """What the server admits of each upload before its step (models.core.pipeline.validate): a factor per upload,
        1 to keep it, in (0, 1) to shrink it, 0 to refuse it; None when there is nothing to check against."""
        return None

    def support_view(self, server: State) -> SupportView | None:
        """What the support rule reads of the server state, or None: an algorithm without the rule (or a job
        that switched it off)."""
        return None

    def restrict(self, server: State, broadcast: State, shared: np.ndarray) -> State:
        """The broadcast with only the `shared` units normal for the fleet (remembered in the server state)."""
        return broadcast

    def touched(self, server: State, client_ids: np.ndarray) -> dict[str, np.ndarray]:
        """For each of `row_tables`, the row indices a server step with these clients may have changed."""
        return {}

    def table_lengths(self, server: State) -> dict[str, int]:
        """For row tables allocated beyond what they hold, the rows in use (what is stored); others: whole."""
        return {}

    def upload_bytes(self) -> int:
        """Bytes a sampled client uploads per round (payload only)."""
        return 0

    def broadcast_bytes(self) -> int:
        """Bytes of the broadcast a round message carries (payload only; the first rounds carry the initial client
        state too, about as large)."""
        return 0

    def client_bytes(self) -> int:
        """Memory a client step needs beyond the device's records (its state, the broadcast, the largest
        temporaries): what a job asks of every agent."""
        return 0


MAX_STEPS = 1000


def step_count(name: str, value: int) -> int:
    """A count of local steps or iterations: at least 1, and bounded so that a setting cannot stall a
    round on every device (MAX_STEPS)."""
    if not 1 <= value <= MAX_STEPS:
        raise ValueError(f"{name} must be between 1 and {MAX_STEPS}, got {value}")
    return int(value)


def make(registry: Mapping[str, type], name: str, names: tuple[str, ...], **params: Any) -> Any:
    """Instantiate registry[name] with its parameters (None means its default); a parameter the
    algorithm does not take is a ValueError naming it (`models.params.check_params`)."""
    from models.params import PROBLEM_ARGS, check_params

    try:
        cls = registry[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(names)}") from None
    problem = {k: params.pop(k) for k in PROBLEM_ARGS if k in params}
    return cls(**problem, **check_params(cls, {k: v for k, v in params.items() if v is not None}))


def take(state: State, idx: np.ndarray) -> State:
    """The sub-batch of a batched dict at positions idx."""
    return {k: v[idx] for k, v in state.items()}


def put(state: State, idx: np.ndarray, part: State) -> None:
    """Write a sub-batch back into a batched dict (in place)."""
    for k, v in part.items():
        state[k][idx] = v


def client_rows(server: State, ids: np.ndarray, tables: tuple[str, ...]) -> np.ndarray:
    """The rows of these clients in the server's per-client tables, handing out new rows (in order of first
    answer; the tables grow by doubling) to clients answering for the first time: memory and work follow the
    clients seen, not the federation. ``server["slot"]`` holds each client's row + 1 (0 before it answered),
    ``server["rows"]`` how many rows are in use; `tables` are updated in place."""
    ids = np.asarray(ids, dtype=np.int64)
    fresh = ids[server["slot"][ids] == 0]
    n = int(server["rows"])
    if len(fresh):
        need = n + len(fresh)
        if need > len(server[tables[0]]):
            cap = max(need, 2 * len(server[tables[0]]), 16)
            for k in tables:
                grown = np.zeros((cap, *server[k].shape[1:]))
                grown[:n] = server[k][:n]
                server[k] = grown
        server["slot"][fresh] = np.arange(n + 1, need + 1)
        server["rows"] = np.array(need)
    return server["slot"][ids] - 1

