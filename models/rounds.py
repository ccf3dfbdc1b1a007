"""One round of any federated algorithm, written once: who is sampled, and what a round does.

The in-process simulators call these two functions in their loops; the deployment splits the same
round across the network (the coordinator samples with `sample_clients` and runs the server step, each
sampled agent runs the client step, and applies `client_finish` when the next broadcast arrives). The
broker-free loopback test (`tests/integration/test_loopback.py`) pins the two together for every
registered algorithm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from models.federated import FederatedAlgorithm, State


def sample_clients(rng: np.random.Generator, n_clients: int, fraction: float) -> np.ndarray:
    """The sorted indices of the clients sampled for one round: max(1, round(fraction * N)) of them."""
    per_round = max(1, int(round(fraction * n_clients)))
    return np.sort(rng.choice(n_clients, per_round, replace=False))


@dataclass
class RoundResult:
    server: State
    broadcast: State  # the next broadcast
    states: State  # the sampled clients' states after the round (dual updates applied)
    uploads: State  # what the clients sent (after any tampering)


def run_round(
    algorithm: FederatedAlgorithm,
    server: State,
    broadcast: State,
    client_ids: np.ndarray,
    states: State,
    data: State,
    weight: np.ndarray,
    tamper: Callable[[State], State] | None = None,
) -> RoundResult:
    """Client steps of the sampled clients (one batched call), server step, then each client's finish
    with the new broadcast. `tamper` lets a simulation replace uploads (attacks) before aggregation.

    The server step may update `server` in place (the caller hands it over)."""
    states, uploads = algorithm.client_update(states, data, broadcast)
    if tamper is not None:
        uploads = tamper(uploads)
    server, broadcast = algorithm.server_update(server, client_ids, uploads, weight)
    return RoundResult(server, broadcast, algorithm.client_finish(states, broadcast), uploads)
