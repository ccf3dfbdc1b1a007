"""The contract every federated algorithm follows: a pure client step and a pure server step.

State and messages are plain dicts of numpy arrays, so the in-process simulator, the MQTT agent and
the coordinator can all drive the same functions (and persist what they hold). Client-side functions
take *batched* state: every array carries a leading axis over clients (length 1 on a device,
the sampled clients in the simulator), so one call does the work of a whole round.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

State = dict[str, np.ndarray]


class FederatedAlgorithm(ABC):
    """A federated algorithm as a Strategy: hyper-parameters in __init__, pure steps below."""

    name: str = ""

    @abstractmethod
    def init_server(self, d: int, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        """Return (server_state, first_broadcast)."""

    @abstractmethod
    def init_clients(self, C: np.ndarray, weight: np.ndarray, broadcast: State) -> State:
        """Initial state of a batch of clients with second moments C (b, d, d) and weights (b,)."""

    @abstractmethod
    def client_update(
        self, state: State, C: np.ndarray, weight: np.ndarray, broadcast: State
    ) -> tuple[State, np.ndarray]:
        """Local work of the sampled clients on the current broadcast: (new state, uploads (b, ...))."""

    def client_finish(self, state: State, broadcast: State) -> State:
        """Called once with the broadcast that follows a round a client took part in (dual updates)."""
        return state

    @abstractmethod
    def server_update(
        self, server: State, client_ids: np.ndarray, uploads: np.ndarray, weight: np.ndarray
    ) -> tuple[State, State]:
        """Aggregate the uploads of the clients that answered: (new server state, next broadcast)."""

    @abstractmethod
    def consensus(self, broadcast: State) -> np.ndarray:
        """The orthonormal d x k basis Z that the detector scores with."""

    def upload_bytes(self, d: int) -> int:
        """Bytes a sampled client uploads per round (payload only)."""
        return 0


def take(state: State, idx: np.ndarray) -> State:
    """The sub-batch of a client state at positions idx."""
    return {k: v[idx] for k, v in state.items()}


def put(state: State, idx: np.ndarray, part: State) -> None:
    """Write a sub-batch back into a client state (in place)."""
    for k, v in part.items():
        if k not in state:
            state[k] = np.zeros((len(next(iter(state.values()))),) + v.shape[1:], dtype=v.dtype)
        state[k][idx] = v
