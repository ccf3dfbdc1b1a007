"""A federated recommendation job on the coordinator.

    stats        every participant sends its rating count and sum -> the global mean
    setup 1..S   every participant runs the algorithm's setup step (AltGDMin's spectral start; S may be 0)
    train        a seeded sample uploads item-side rows; the algorithm's server step aggregates
    eval         every participant sends the squared error and count of its held-out ratings -> test RMSE
    finished     the item model is stored as a model version and promoted (the recommendations API serves
                 new users from it by fold-in)

The server keeps what the algorithm's server state holds (FedMC-ADMM: the item factors, a running sum
and counts; nothing per client) and the uploads of the round in progress.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, cast

import numpy as np

from coordinator.job_runner import Phase
from coordinator.private_recsys import PrivateRecsys, item_change
from models.core.messages import MessageType, Upload
from models.core.pipeline import close_round
from models.recsys import RecsysAlgorithm
from models.recsys.data import global_mean, stack
from models.recsys.messages import Evaluation, RatingSums, RecsysRound, SetupStep
from models.recsys.spec import RecsysJobSpec
from store.db import ModelVersion, pack, unpack
from wire.protocol import ProtocolError

log = logging.getLogger("fedsentry.coordinator")

MAX_UPLOAD_NORM = 1e9
#: the most users one device may say it holds (private mode's clip is in units of it)
MAX_USERS = 10_000_000


class RecsysJob(PrivateRecsys):
    type = "recsys"
    replies: ClassVar[dict[str, MessageType]] = {"stats": RatingSums, "setup": SetupStep, "train": Upload,
                                                   "eval": Evaluation}

    spec: RecsysJobSpec

    def algorithm(self) -> RecsysAlgorithm:
        return cast(RecsysAlgorithm, self.spec.make_algorithm())

    @property
    def setup_rounds(self) -> int:
        return int(self.algorithm().setup_rounds)

    def reply_type(self, phase: str) -> MessageType | None:
        return self.private_reply(phase) if self.spec.private else super().reply_type(phase)

    def follow(self) -> None:
        if self.spec.private:
            self.private_follow()
        else:
            super().follow()

    def content(self, phase: str, header: dict[str, Any]) -> RecsysRound:
        common = {**header, "rank": self.spec.rank, "params": self.spec.algorithm_params,
                  "n_items": len(self.spec.items), **(self.private_fields(phase) if self.spec.private else {})}
        if phase == "stats":
            return RecsysRound(**common, items=self.spec.items)
        # the initial state, until every participant has initialised its own (private: until the first sum is done)
        first = not self.info.get("sums", {}).get("train") if self.spec.private else \
            self.round <= self.setup_rounds + 1
        init = unpack(bytes.fromhex(self.info["init_blob"])) if first else {}
        return RecsysRound(**common, broadcast=dict(self.broadcast), init=init, mean=self.info["mean"])

    def phase_table(self) -> list[Phase]:
        return [Phase("stats"), Phase("setup", self.setup_rounds), Phase("train", self.spec.rounds, sampled=True),
                Phase("eval")]

    # -- replies --------------------------------------------------------------------------------------
    def validate(self, msg: Any, sender: str) -> None:
        if isinstance(msg, RatingSums):
            if msg.count.shape != (1,) or msg.sum.shape != (1,) or msg.count[0] < 0:
                raise ProtocolError("shape", "stats need count (1,) >= 0 and sum (1,)")
            if msg.users is not None and (msg.users.shape != (1,) or not 1 <= msg.users[0] <= MAX_USERS):
                raise ProtocolError("value", f"users must be one count between 1 and {MAX_USERS}")
            return
        if isinstance(msg, Evaluation):
            if msg.sq_error.shape != (1,) or msg.count.shape != (1,) or msg.sq_error[0] < 0 or msg.count[0] < 0:
                raise ProtocolError("shape", "eval needs sq_error (1,) >= 0 and count (1,) >= 0")
            return
        if self.spec.private:
            self.validate_step(msg, sender)
            return
        a = msg.arrays
        items = a.get("items")
        if items is None or items.ndim != 1 or items.dtype.kind not in "iu":
            raise ProtocolError("shape", "an upload needs a 1-d integer array 'items'")
        if len(items) and (items.min() < 0 or items.max() >= len(self.spec.items)):
            raise ProtocolError("value", "item ids outside the catalogue")
        for name, arr in a.items():
            if name != "items" and arr.ndim >= 1 and arr.shape[0] != len(items):
                raise ProtocolError("shape", f"array {name!r} has {arr.shape[0]} rows for {len(items)} items")
            if arr.dtype.kind == "f" and float(np.linalg.norm(arr)) > MAX_UPLOAD_NORM:
                raise ProtocolError("norm", f"array {name!r} has an implausible norm")

    # -- closing rounds -------------------------------------------------------------------------------
    def close(self, answered: list[str]) -> dict[str, Any]:
        if self.phase == "stats":
            return self.close_stats(answered)
        if self.phase == "eval":
            sq = sum(float(self.pending[a].sq_error[0]) for a in answered)
            n = sum(int(self.pending[a].count[0]) for a in answered)
            self.info["test_rmse"] = float(np.sqrt(sq / n)) if n else None
            return {"test_rmse": self.info["test_rmse"], "test_ratings": n}
        if self.spec.private:
            return self.close_step(answered)
        if not answered:
            return {"item_change": 0.0}
        uploads = stack([{k: v[None] for k, v in self.pending[a].arrays.items()} for a in answered])
        before = self.broadcast["item_factors"]
        if self.phase == "setup":
            self.server, self.broadcast = self.algorithm().server_setup(self.server, uploads)
        else:
            ids, weights = self.weights(answered)
            self.server, self.broadcast = close_round(self.algorithm(), self.server, ids, uploads, weights)
        after = self.broadcast["item_factors"]
        return {"item_change": item_change(before, after)}

    def close_stats(self, answered: list[str]) -> dict[str, Any]:
        if not answered:
            self.fail("no agent answered the statistics phase")
            return {}
        self.participants = answered
        counts = np.array([int(self.pending[a].count[0]) for a in answered], dtype=float)
        sums = np.array([float(self.pending[a].sum[0]) for a in answered])
        self.info = {"mean": global_mean(counts, sums)}
        self.counts, self.roster_saved = counts.tolist(), False
        self.rng = np.random.default_rng(self.spec.seed)
        self.server, self.broadcast = self.algorithm().init_server(len(answered), self.rng)
        self.info["init_blob"] = pack(self.broadcast).hex()
        if self.spec.private:
            self.private_stats(answered)
        return {"ratings": int(counts.sum()), "mean": self.info["mean"]}

    def finish(self) -> None:
        from coordinator.models_service import promote

        alg = self.algorithm()
        with self.sessions.begin() as s:
            self.fence(s)
            version = s.query(ModelVersion).filter_by(job_id=self.job_id).count() + 1
            mv = ModelVersion(job_id=self.job_id, version=version, type="recsys", round=self.spec.rounds,
                              arrays=pack({"item_factors": alg.item_factors(self.broadcast)}), published=False,
                              info={"items": self.spec.items, "mean": self.info["mean"],
                                    "rating_min": self.spec.rating_min, "rating_max": self.spec.rating_max,
                                    "lam": alg.lam, "test_rmse": self.info.get("test_rmse")})
            s.add(mv)
            s.flush()
            model_id = mv.id
        promote(self.sessions, model_id)
        self.phase = "finished"
        self.set_job(status="finished", phase="finished")
        log.info("job=%s finished: test_rmse=%s", self.job_id, self.info.get("test_rmse"))
