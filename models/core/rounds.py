"""The rounds of any federated algorithm, written once: who is sampled, what a round does, and the loop.

`Rounds` is the loop's state (the algorithm, the server state, the broadcast, the seeded generator that samples)
with its two steps: `sample` (who takes part in the next round) and `close` (the server step on the answers).
`simulate` drives it in-process: the sampled clients' steps run through a `ClientPool` (the simulation's
transport: their data and states in memory), then the server step, then each client's finish with the new
broadcast. Every simulator (PCA, mixture, recommendation) and `fedsentry bench rounds` run this loop; the
deployment runs the same steps across the network (the coordinator samples with `models.core.sampling.sample`
and runs the server step, each sampled agent runs the client step and applies `client_finish` when the next broadcast
arrives). The broker-free loopback test (`tests/integration/test_loopback.py`) pins the two together for every
registered algorithm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from models.core.federated import FederatedAlgorithm, State, put, take
from models.core.pipeline import close_round
from models.core.sampling import fleet_names, sample


class RoundFailedError(Exception):
    """A round whose answers cannot reach the server step (private mode: too few devices left to unmask the secure
    sum). Nothing of it counts: the server state, the broadcast and every client's state stay as they were, and the
    loop goes on with the next round."""


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
    receive: Callable[[np.ndarray, State], State] | None = None,
) -> RoundResult:
    """Client steps of the sampled clients (one batched call), server step, then each client's finish
    with the new broadcast. `tamper` lets a simulation replace uploads (attacks) before aggregation; `receive` is
    what the server gets of them (private mode: their secure sum, models.private.transport).

    The server step may update `server` in place (the caller hands it over)."""
    states, uploads = algorithm.client_update(states, data, broadcast)
    if tamper is not None:
        uploads = tamper(uploads)
    received = receive(client_ids, uploads) if receive is not None else uploads
    server, broadcast = close_round(algorithm, server, client_ids, received, weight)
    return RoundResult(server, broadcast, algorithm.client_finish(states, broadcast), uploads)


@dataclass
class Rounds:
    """A federated algorithm's loop state: sample the next round, close it with the answers."""

    algorithm: FederatedAlgorithm
    server: State
    broadcast: State
    rng: np.random.Generator
    n_clients: int
    fraction: float
    round: int = 0
    #: the clients' ids in order (a draw above the switch hashes them, models.core.sampling): by default the demo's
    names: list[str] | None = None

    @classmethod
    def start(cls, algorithm: FederatedAlgorithm, n_clients: int, fraction: float,
              rng: np.random.Generator) -> Rounds:
        """The algorithm's first server state and broadcast (drawn from `rng`, which then samples)."""
        server, broadcast = algorithm.init_server(n_clients, rng)
        return cls(algorithm, server, broadcast, rng, n_clients, fraction)

    def sample(self) -> np.ndarray:
        """The clients of the next round (the seeded share of the federation)."""
        self.round += 1
        if self.names is None:
            self.names = fleet_names(self.n_clients)
        return sample(self.rng, self.names, self.fraction)[0]

    def close(self, client_ids: np.ndarray, uploads: State, weight: np.ndarray) -> State:
        """The server step on the answers of the round (the server state is handed over); the next broadcast."""
        self.server, self.broadcast = close_round(self.algorithm, self.server, client_ids, uploads, weight)
        return self.broadcast


class ClientPool(Protocol):
    """The simulated clients' data and states: the in-process transport of `simulate`."""

    def take(self, ids: np.ndarray) -> tuple[State, State]:
        """(states, data) of these clients as one batch."""

    def put(self, ids: np.ndarray, states: State) -> None:
        """Keep these clients' states after their round."""


@dataclass
class BatchedPool:
    """Every client's data and state as one batched dict (arrays with the clients on the first axis)."""

    data: State
    states: State

    @classmethod
    def of(cls, algorithm: FederatedAlgorithm, data: State, broadcast: State) -> BatchedPool:
        return cls(data, algorithm.init_clients(data, broadcast))

    def take(self, ids: np.ndarray) -> tuple[State, State]:
        return take(self.states, ids), take(self.data, ids)

    def put(self, ids: np.ndarray, states: State) -> None:
        put(self.states, ids, states)


@dataclass
class ListPool:
    """One batch of one per client (clients of different sizes), padded into one batch per round by `stack` and
    split back by `unstack` (models.recsys.data)."""

    data: list[State]
    states: list[State]
    stack: Callable[[list[State]], State]
    unstack: Callable[[State, list[State]], list[State]]

    def take(self, ids: np.ndarray) -> tuple[State, State]:
        return self.stack([self.states[i] for i in ids]), self.stack([self.data[i] for i in ids])

    def put(self, ids: np.ndarray, states: State) -> None:
        for i, s in zip(ids, self.unstack(states, [self.states[i] for i in ids])):
            self.states[i] = s


@dataclass
class Hooks:
    """What a simulation adds to the loop: who of the sampled answer (dropouts), the clients' data before their
    step (a residual trim), their uploads after it (attacks), what the server receives of them (a secure sum),
    and what to record of each round."""

    answering: Callable[[np.ndarray], np.ndarray] | None = None
    before: Callable[[np.ndarray, Rounds], None] | None = None
    tamper: Callable[[np.ndarray, State], Callable[[State], State] | None] | None = None
    observe: Callable[[np.ndarray, RoundResult], None] | None = None
    receive: Callable[[np.ndarray, State], State] | None = None
    #: of the round's clients, those whose uploads the server step received (a secure sum refuses a device whose
    #: proofs fail): only they keep their new state; the others keep the one they had, as a client that never answered
    counted: Callable[[np.ndarray], np.ndarray] | None = None
    seconds: list[float] = field(default_factory=list)  # each round's time (client and server steps)
    failed: list[str] = field(default_factory=list)  # why each failed round failed (RoundFailedError)


def simulate(loop: Rounds, pool: ClientPool, weight: np.ndarray, rounds: int, hooks: Hooks | None = None,
             everyone_first: bool = False, everyone_while: Callable[[State], bool] | None = None) -> Hooks:
    """`rounds` rounds of the loop in-process, after a seeding phase with every client: one round with
    `everyone_first`, or as many as `everyone_while` holds of the broadcast (at most 64). `weight`: each client's,
    or the records it claimed where the server state holds weight caps (the pipeline's cap stage makes them
    weights). Returns the hooks, with each round's seconds."""
    hooks = hooks or Hooks()
    everyone = np.arange(loop.n_clients)
    for _ in range(64 if everyone_while is not None else int(everyone_first)):
        if everyone_while is not None and not everyone_while(loop.broadcast):
            break
        _round(loop, pool, weight, everyone, hooks)
    for _ in range(rounds):
        _round(loop, pool, weight, loop.sample(), hooks)
    return hooks


def _round(loop: Rounds, pool: ClientPool, weight: np.ndarray, ids: np.ndarray, hooks: Hooks) -> None:
    """One round of the loop with these clients (before dropouts), through the hooks."""
    if hooks.answering is not None:
        ids = hooks.answering(ids)
    if hooks.before is not None:
        hooks.before(ids, loop)
    t0 = time.perf_counter()
    states, data = pool.take(ids)
    tamper = hooks.tamper(ids, loop.broadcast) if hooks.tamper is not None else None
    try:
        done = run_round(loop.algorithm, loop.server, loop.broadcast, ids, states, data, weight[ids], tamper,
                         hooks.receive)
    except RoundFailedError as e:  # the clients' states were taken as copies: they keep what they had
        hooks.failed.append(str(e))
        hooks.seconds.append(time.perf_counter() - t0)
        return
    loop.server, loop.broadcast = done.server, done.broadcast
    if hooks.counted is None:
        pool.put(ids, done.states)
    else:  # the others' states were taken as copies: they keep what they had
        kept = np.isin(ids, hooks.counted(ids))
        pool.put(ids[kept], take(done.states, np.flatnonzero(kept)))
    hooks.seconds.append(time.perf_counter() - t0)
    if hooks.observe is not None:
        hooks.observe(ids, done)
