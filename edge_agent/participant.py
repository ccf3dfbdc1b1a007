"""An agent's part in a job, whatever its family: the client side of the round loop, over envelopes.

The coordinator drives a job with retained round messages (meta ``phase``). The base class handles what
every family shares:

- ``train``: a sampled agent first applies `client_finish` owed since the last round it took part in
  (with the broadcast this message carries: the one that followed that round, as in `models.core.rounds`),
  then runs the algorithm's client step (the very function the simulator calls) and uploads. An agent
  that is not sampled only applies an owed finish; with none owed it touches no disk at all.
- Rounds are idempotent: the reply to a (job, phase, round) is stored with the state it produced, in one
  atomic write, and re-sent unchanged if the same round arrives again; a finish is applied once.

A family adds its data (`client_data`), the algorithm's problem size (`problem`) and its other phases
(`phases`: statistics, thresholds, evaluation, ...). It is registered in `models.families`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from edge_agent.store import AgentStore
from models.core.federated import FederatedAlgorithm, State
from models.families import family
from wire.protocol import Envelope, decode

OWED = "__finish_owed__"  # the state's client_finish is still to be applied with the next broadcast
REPLY = "__reply__"  # the upload this state produced (encoded envelope)
REPLY_ROUND = "__reply_round__"


class Participant(ABC):
    family: ClassVar[str] = ""
    #: round-message arrays that are not part of the algorithm's broadcast
    extra_arrays: ClassVar[tuple[str, ...]] = ()

    def __init__(self, agent_id: str, store: AgentStore):
        self.id, self.store = agent_id, store
        self._owed: dict[str, bool] = {}  # job -> a finish is owed (known after the first look at the disk)
        # the last state written, of the job written last, as written: a round of that job reads the disk only after
        # a restart (one job's, not every job's since the agent started: a job's state stays on disk, and in
        # memory until the next job's round)
        self._saved: dict[str, dict[str, np.ndarray]] = {}

    # -- what a family provides -------------------------------------------------------------------------
    @abstractmethod
    def phases(self) -> dict[str, Callable[[Envelope], Envelope | None]]:
        """Handlers of the phases other than ``train``."""

    @abstractmethod
    def client_data(self, env: Envelope) -> State:
        """This agent's data for the algorithm, as a batch of one."""

    @abstractmethod
    def problem(self, meta: dict[str, Any]) -> dict[str, int]:
        """The dimensions the job's algorithm is built with (n_features or n_items, rank)."""

    # -- dispatch ---------------------------------------------------------------------------------------
    def on_round(self, env: Envelope) -> Envelope | None:
        phase = env.meta.get("phase")
        if phase == "train":
            if self.id not in env.meta.get("sampled", []):
                self.settle(env)
                return None
            return self._train_once(env)
        handler = self.phases().get(str(phase))
        if handler is None:
            return None
        key = f"reply-{env.job}-{phase}-{env.round}.bin"
        cached = self.store.load_bytes(key)
        if cached is not None:
            return decode(cached)
        reply = handler(env)
        if reply is not None:
            self.store.save_bytes(key, reply.encode())
        return reply

    # -- the algorithm and its state ----------------------------------------------------------------------
    def algorithm(self, meta: dict[str, Any]) -> FederatedAlgorithm:
        cls = family(self.family).algorithms[meta["algorithm"]]
        return cls(**self.problem(meta), **meta.get("params", {}))

    def broadcast(self, env: Envelope) -> State:
        return {k: v for k, v in env.arrays.items() if not k.startswith("init.") and k not in self.extra_arrays}

    @staticmethod
    def initial(env: Envelope) -> State:
        return {k[5:]: v for k, v in env.arrays.items() if k.startswith("init.")}

    def load_state(self, job: str) -> tuple[State | None, dict[str, np.ndarray]]:
        """(the algorithm's state, bookkeeping arrays) of a job, or (None, {})."""
        arrays = self._saved.get(job)
        if arrays is None:
            arrays = self.store.load_arrays(f"job-{job}")
            if arrays is None:
                return None, {}
            self._saved = {job: arrays}
        arrays = dict(arrays)
        book = {k: arrays.pop(k) for k in (OWED, REPLY, REPLY_ROUND) if k in arrays}
        return arrays, book

    def save_state(self, job: str, state: State, owed: bool, book: dict[str, np.ndarray] | None = None) -> None:
        arrays = {**state, **(book or {}), OWED: np.array(owed)}
        self.store.save_arrays(f"job-{job}", arrays)
        self._saved = {job: arrays}
        self._owed[job] = owed

    def settle(self, env: Envelope) -> None:
        """Apply an owed finish (a train round this agent is not sampled in); no disk access when none is
        owed."""
        if self._owed.get(env.job) is not False:
            self.current_state(env)

    def current_state(self, env: Envelope) -> State | None:
        """The job's state with any owed finish applied (with this message's broadcast)."""
        state, book = self.load_state(env.job)
        if state is not None and bool(book.get(OWED, False)):
            state = self.algorithm(env.meta).client_finish(state, self.broadcast(env))
            self.save_state(env.job, state, False, book)
        self._owed[env.job] = False
        return state

    def _train_once(self, env: Envelope) -> Envelope | None:
        _, book = self.load_state(env.job)
        answered = int(book.get(REPLY_ROUND, -1))
        if answered == env.round and REPLY in book:
            return decode(book[REPLY].tobytes())  # a redelivered round: the same answer, nothing applied
        if answered > env.round:
            return None  # an old round delivered late: already past it
        return self._train(env)

    def _train(self, env: Envelope) -> Envelope | None:
        """Finish owed, client step, upload; the state and the reply are written in one atomic step."""
        alg, broadcast = self.algorithm(env.meta), self.broadcast(env)
        state, book = self.load_state(env.job)
        if state is not None and bool(book.get(OWED, False)):
            state = alg.client_finish(state, broadcast)
        data = self.client_data(env)
        if state is None:
            state = alg.init_clients(data, self.initial(env) or broadcast)
        state, upload = alg.client_update(state, data, broadcast)
        reply = Envelope("upload", env.job, env.round, self.id, {k: v[0] for k, v in upload.items()})
        self.save_state(env.job, state, True, {REPLY: np.frombuffer(reply.encode(), dtype=np.uint8),
                                               REPLY_ROUND: np.array(env.round)})
        return reply
