"""An agent's part in a federated recommendation job: its users' ratings and factors never leave it.

Phases (meta ``phase`` of the round message):

- ``stats``: rating count and sum (the global mean); the message carries the item catalogue;
- ``setup``: the algorithm's setup step with every participant (AltGDMin's spectral initialisation);
- ``train``: if sampled, the algorithm's client step (the very function the simulator calls) on the
  agent's ratings, uploading only item-side rows;
- ``eval``: the squared error and count of its held-out ratings under its own user factors and the
  final item factors, so the coordinator can pool a test RMSE without seeing any rating.

The round loop (train, idempotent replies, owed finishes) is `edge_agent.participant`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from edge_agent.participant import Participant
from edge_agent.store import AgentStore
from models.recsys.base import RecsysAlgorithm
from models.recsys.data import Ratings, client_data
from models.recsys.factors import predict_pairs
from models.recsys.messages import Evaluation, RatingSums, SetupStep
from wire.messages import envelope
from wire.protocol import Envelope

log = logging.getLogger("fedsentry.agent")


class RecsysParticipant(Participant):
    family = "recsys"

    def __init__(self, agent_id: str, store: AgentStore, train: Ratings, test: Ratings | None = None):
        super().__init__(agent_id, store)
        self.train, self.test = train, test
        users = train.user_ids if test is None else np.union1d(train.user_ids, test.user_ids)
        self.users = np.asarray(users)

    def phases(self) -> dict[str, Callable[[Envelope], Envelope | None]]:
        return {"stats": self._stats, "setup": self._setup, "eval": self._eval}

    def problem(self, meta: dict[str, Any]) -> dict[str, int]:
        return {"n_items": int(meta["n_items"]), "rank": int(meta["rank"])}

    def algorithm(self, meta: dict[str, Any]) -> RecsysAlgorithm:
        alg = super().algorithm(meta)
        if not isinstance(alg, RecsysAlgorithm):  # the family registry holds only RecsysAlgorithm subclasses
            raise TypeError(f"{type(alg).__name__} is not a RecsysAlgorithm")
        return alg

    # -- the agent's data in the job's catalogue ------------------------------------------------------
    def _job(self, env: Envelope) -> dict:
        job = self.store.load_json(f"recsys-{env.job}", None)
        if job is None:
            if "items" not in env.meta:
                raise ValueError("joined after the statistics phase: no item catalogue")
            job = {"items": env.meta["items"]}
            self.store.save_json(f"recsys-{env.job}", job)
        return job

    def _indexed(self, r: Ratings, catalogue: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(local user, catalogue item, rating) of ratings whose item the job knows."""
        pos = {str(i): k for k, i in enumerate(catalogue)}
        items = np.array([pos.get(str(i), -1) for i in r.item_ids[r.item]], dtype=np.int64)
        known = items >= 0
        if not known.all():
            log.warning("agent=%s %d ratings of items outside the job's catalogue are left out", self.id,
                        int((~known).sum()))
        users = np.searchsorted(self.users, r.user_ids[r.user])
        return users[known], items[known], r.rating[known]

    def client_data(self, env: Envelope) -> dict[str, np.ndarray]:
        catalogue = self._job(env)["items"]
        u, i, v = self._indexed(self.train, catalogue)
        mine = Ratings(u, i, v, np.arange(len(self.users)), np.arange(len(catalogue)),
                       self.train.rating_min, self.train.rating_max)
        return client_data(mine, [np.arange(len(self.users))], float(env.meta["mean"]))[0]

    # -- phases ---------------------------------------------------------------------------------------
    def _stats(self, env: Envelope) -> Envelope:
        self._job(env)
        _, _, v = self._indexed(self.train, env.meta["items"])
        sums = RatingSums(count=np.array([len(v)], dtype=np.int64), sum=np.array([float(v.sum())]))
        return envelope(sums, env.job, env.round, self.id)

    def _setup(self, env: Envelope) -> Envelope:
        """The algorithm's setup step, with every participant; the state starts here (as in the simulator)."""
        alg, data = self.algorithm(env.meta), self.client_data(env)
        state = self.current_state(env)
        if state is None:
            state = alg.init_clients(data, self.initial(env) or self.broadcast(env))
            self.save_state(env.job, state, False)
        uploads = alg.client_setup(state, data, self.broadcast(env))
        return envelope(SetupStep(arrays={k: v[0] for k, v in uploads.items()}), env.job, env.round, self.id)

    def _eval(self, env: Envelope) -> Envelope:
        alg = self.algorithm(env.meta)
        state = self.current_state(env)
        sq, n = 0.0, 0
        if self.test is not None and len(self.test):
            u, i, v = self._indexed(self.test, self._job(env)["items"])
            P = state["user_factors"][0] if state is not None else np.zeros((len(self.users), alg.width))
            Q = alg.item_factors(self.broadcast(env))
            pred = np.clip(float(env.meta["mean"]) + predict_pairs(P[u], Q[i]), self.test.rating_min,
                           self.test.rating_max)
            sq, n = float(((pred - v) ** 2).sum()), len(v)
        evaluation = Evaluation(sq_error=np.array([sq]), count=np.array([n], dtype=np.int64))
        return envelope(evaluation, env.job, env.round, self.id)
