"""An agent's part in a federated recommendation job: its users' ratings and factors never leave it.

Phases (meta ``phase`` of the round message):

- ``stats``: rating count and sum (the global mean); the message carries the item catalogue;
- ``setup``: the algorithm's setup step with every participant (AltGDMin's spectral initialisation);
- ``train``: if sampled, the algorithm's client step (the very function the simulator calls) on the
  agent's ratings, uploading only item-side rows;
- ``eval``: the squared error and count of its held-out ratings under its own user factors and the
  final item factors, so the coordinator can pool a test RMSE without seeing any rating.

Private mode (coordinator.private_recsys): the statistics also say how many users the agent holds; each training
round is a secure sum (``train:advertise`` .. ``train:unmask``, `edge_agent.participant`) of the client step's
upload laid out over the catalogue (models.recsys.private.dense, the simulator's); the state that step made is kept
aside until a later round says the sum's total holds it (`counted`).

The round loop (train, idempotent replies, owed finishes) is `edge_agent.participant`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from edge_agent.participant import Participant, Request
from edge_agent.store import AgentStore
from models.recsys.base import RecsysAlgorithm
from models.recsys.data import Ratings, client_data
from models.recsys.factors import predict_pairs
from models.recsys.messages import Evaluation, RatingSums, RecsysRound, SetupStep
from wire.protocol import Envelope

log = logging.getLogger("fedsentry.agent")


class RecsysParticipant(Participant):
    family = "recsys"
    round_message = RecsysRound

    def __init__(self, agent_id: str, store: AgentStore, train: Ratings, test: Ratings | None = None):
        super().__init__(agent_id, store)
        self.train, self.test = train, test
        users = train.user_ids if test is None else np.union1d(train.user_ids, test.user_ids)
        self.users = np.asarray(users)

    def phases(self) -> dict[str, Callable[[Request], Envelope | None]]:
        return {"stats": self._stats, "setup": self._setup, "eval": self._eval}

    def problem(self, msg: RecsysRound) -> dict[str, int]:
        return {"n_items": int(msg.n_items), "rank": int(msg.rank)}

    def algorithm(self, msg: RecsysRound) -> RecsysAlgorithm:
        alg = super().algorithm(msg)
        if not isinstance(alg, RecsysAlgorithm):  # the family registry holds only RecsysAlgorithm subclasses
            raise TypeError(f"{type(alg).__name__} is not a RecsysAlgorithm")
        return alg

    # -- the agent's data in the job's catalogue ------------------------------------------------------
    def _job(self, req: Request) -> dict:
        job = self.store.load_json(f"recsys-{req.job}", None)
        if job is None:
            if req.msg.items is None:
                raise ValueError("joined after the statistics phase: no item catalogue")
            job = {"items": req.msg.items}
            self.store.save_json(f"recsys-{req.job}", job)
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

    @staticmethod
    def mean(msg: RecsysRound) -> float:
        if msg.mean is None:
            raise ValueError(f"a {msg.phase} round carries the fleet's mean rating")
        return float(msg.mean)

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        catalogue = self._job(req)["items"]
        u, i, v = self._indexed(self.train, catalogue)
        mine = Ratings(u, i, v, np.arange(len(self.users)), np.arange(len(catalogue)),
                       self.train.rating_min, self.train.rating_max)
        return client_data(mine, [np.arange(len(self.users))], self.mean(req.msg))[0]

    # -- phases ---------------------------------------------------------------------------------------
    def _stats(self, req: Request) -> Envelope:
        self._job(req)
        _, _, v = self._indexed(self.train, req.msg.items)
        users = np.array([len(self.users)], dtype=np.int64) if req.msg.private else None
        return req.reply(RatingSums(count=np.array([len(v)], dtype=np.int64), sum=np.array([float(v.sum())]),
                                    users=users), self.id)

    def secure_values(self, name: str, req: Request) -> dict[str, np.ndarray]:
        """A private job's training sum: the client step (the simulator's) and its upload as this device's rows over
        the catalogue (models.recsys.private.dense, the simulator's); the new state kept aside until it counts."""
        from models.recsys.private import dense

        if name == "setup":  # the setup step (AltGDMin's power iteration): the state starts here, unchanged by it
            alg, data = self.algorithm(req.msg), self.client_data(req)
            return {k: v[0] for k, v in dense(alg, alg.client_setup(self.started(req, alg, data), data,
                                                                    req.msg.broadcast)).items()}
        if name != "train":
            raise ValueError(f"a recsys agent has no secure sum {name!r}")
        alg, data = self.algorithm(req.msg), self.client_data(req)
        self.commit_counted(req.job, req.msg.counted, True)
        new, upload = alg.client_update(self.started(req, alg, data), data, req.msg.broadcast)
        self.keep_pending(req.job, new, str((req.msg.secagg or {})["label"]))
        return {k: v[0] for k, v in dense(alg, upload).items()}

    def counted_state(self, req: Request) -> dict[str, np.ndarray] | None:
        """The job's state as the coordinator's sums hold it: the state made for the last sum whose total holds this
        device's upload (the round message's `counted`) committed now, its finish owed; one whose upload did not
        count is dropped."""
        self.commit_counted(req.job, req.msg.counted, True)
        return self.current_state(req)

    def started(self, req: Request, alg: RecsysAlgorithm, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The job's state, started here if this device has none (as in the simulator)."""
        state = self.current_state(req)
        if state is None:
            state = alg.init_clients(data, req.msg.init or req.msg.broadcast)
            self.save_state(req.job, state, False)
        return state

    def _setup(self, req: Request) -> Envelope:
        """The algorithm's setup step, with every participant; the state starts here (as in the simulator)."""
        alg, data = self.algorithm(req.msg), self.client_data(req)
        uploads = alg.client_setup(self.started(req, alg, data), data, req.msg.broadcast)
        return req.reply(SetupStep(arrays={k: v[0] for k, v in uploads.items()}), self.id)

    def _eval(self, req: Request) -> Envelope:
        msg: RecsysRound = req.msg
        alg = self.algorithm(msg)
        state = self.counted_state(req) if msg.private else self.current_state(req)
        sq, n = 0.0, 0
        if self.test is not None and len(self.test):
            u, i, v = self._indexed(self.test, self._job(req)["items"])
            P = state["user_factors"][0] if state is not None else np.zeros((len(self.users), alg.width))
            Q = alg.item_factors(msg.broadcast)
            pred = np.clip(self.mean(msg) + predict_pairs(P[u], Q[i]), self.test.rating_min, self.test.rating_max)
            sq, n = float(((pred - v) ** 2).sum()), len(v)
        return req.reply(Evaluation(sq_error=np.array([sq]), count=np.array([n], dtype=np.int64)), self.id)
