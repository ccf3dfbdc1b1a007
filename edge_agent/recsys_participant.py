"""An agent's part in a federated recommendation job: its users' ratings and factors never leave it.

Phases (meta ``phase`` of the round message):

- ``stats``: rating count and sum (the global mean); the message carries the item catalogue;
- ``setup``: the algorithm's setup step with every participant (AltGDMin's spectral initialisation);
- ``train``: if sampled, the algorithm's client step (the very function the simulator calls) on the
  agent's ratings, uploading only item-side rows;
- ``eval``: the squared error and count of its held-out ratings under its own user factors and the
  final item factors, so the coordinator can pool a test RMSE without seeing any rating.

Replies are cached per (job, phase, round): a redelivered round gets the same answer and changes nothing.
"""

from __future__ import annotations

import logging

import numpy as np

from edge_agent.store import AgentStore
from models.recsys import make_algorithm
from models.recsys.data import Ratings, client_data
from models.recsys.factors import predict_pairs
from wire.protocol import Envelope, decode

log = logging.getLogger("fedsentry.agent")


class RecsysParticipant:
    def __init__(self, agent_id: str, store: AgentStore, train: Ratings, test: Ratings | None = None):
        self.id, self.store, self.train, self.test = agent_id, store, train, test
        users = train.user_ids if test is None else np.union1d(train.user_ids, test.user_ids)
        self.users = np.asarray(users)

    def on_round(self, env: Envelope) -> Envelope | None:
        phase = env.meta.get("phase")
        key = f"reply-{env.job}-{phase}-{env.round}.bin"
        cached = self.store.load_bytes(key)
        if cached is not None:
            return decode(cached)
        handler = {"stats": self._stats, "setup": self._setup, "train": self._train, "eval": self._eval}.get(phase)
        if handler is None:
            return None
        reply = handler(env)
        if reply is not None:
            self.store.save_bytes(key, reply.encode())
        return reply

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

    def _data(self, env: Envelope) -> dict[str, np.ndarray]:
        catalogue = self._job(env)["items"]
        u, i, v = self._indexed(self.train, catalogue)
        mine = Ratings(u, i, v, np.arange(len(self.users)), np.arange(len(catalogue)),
                       self.train.rating_min, self.train.rating_max)
        return client_data(mine, [np.arange(len(self.users))], float(env.meta["mean"]))[0]

    def _algorithm(self, env: Envelope):
        return make_algorithm(env.meta["algorithm"], int(env.meta["n_items"]), int(env.meta["rank"]),
                              **env.meta.get("params", {}))

    @staticmethod
    def _broadcast(env: Envelope) -> dict[str, np.ndarray]:
        return {k: v for k, v in env.arrays.items() if not k.startswith("init.")}

    def _state(self, env: Envelope, alg, data) -> dict[str, np.ndarray]:
        state = self.store.load_arrays(f"job-{env.job}")
        if state is None:  # initialised with the job's first broadcast, as in the simulator
            init = {k[5:]: v for k, v in env.arrays.items() if k.startswith("init.")} or self._broadcast(env)
            state = alg.init_clients(data, init)
        return state

    # -- phases ---------------------------------------------------------------------------------------
    def _stats(self, env: Envelope) -> Envelope:
        self._job(env)
        _, _, v = self._indexed(self.train, env.meta["items"])
        return Envelope("stats", env.job, env.round, self.id,
                        {"count": np.array([len(v)], dtype=np.int64), "sum": np.array([float(v.sum())])})

    def _setup(self, env: Envelope) -> Envelope:
        alg, data = self._algorithm(env), self._data(env)
        state = self._state(env, alg, data)
        self.store.save_arrays(f"job-{env.job}", state)
        uploads = alg.client_setup(state, data, self._broadcast(env))
        return Envelope("setup", env.job, env.round, self.id, {k: v[0] for k, v in uploads.items()})

    def _train(self, env: Envelope) -> Envelope | None:
        if self.id not in env.meta.get("sampled", []):
            return None
        alg, data = self._algorithm(env), self._data(env)
        state = self._state(env, alg, data)
        broadcast = self._broadcast(env)
        state, uploads = alg.client_update(state, data, broadcast)
        state = alg.client_finish(state, broadcast)
        self.store.save_arrays(f"job-{env.job}", state)
        return Envelope("upload", env.job, env.round, self.id, {k: v[0] for k, v in uploads.items()})

    def _eval(self, env: Envelope) -> Envelope:
        alg = self._algorithm(env)
        state = self.store.load_arrays(f"job-{env.job}")
        sq, n = 0.0, 0
        if self.test is not None and len(self.test):
            u, i, v = self._indexed(self.test, self._job(env)["items"])
            P = state["user_factors"][0] if state is not None else np.zeros((len(self.users), alg.width))
            Q = alg.item_factors(self._broadcast(env))
            pred = np.clip(float(env.meta["mean"]) + predict_pairs(P[u], Q[i]), self.test.rating_min,
                           self.test.rating_max)
            sq, n = float(((pred - v) ** 2).sum()), len(v)
        return Envelope("eval", env.job, env.round, self.id,
                        {"sq_error": np.array([sq]), "count": np.array([n], dtype=np.int64)})
