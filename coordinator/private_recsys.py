"""A recommendation job in private mode on the coordinator (issue 23, point 2): each training round's upload reaches
the server step only as the secure sum of its devices' uploads, as in the simulator's private mode
(models.recsys.private), each sum four rounds of the job (coordinator.secure_sums: deadlines, saved state, resume):

    stats                  every participant sends its rating count and sum (the fleet's mean) and how many users it
                           holds (the clip's bound, `most`)
    setup:advertise..unmask  per setup round (AltGDMin's power iterations), every participant's secure sum of its
                           setup step's rows; the algorithm's setup step on the sum
    train:advertise..unmask  per training round, a seeded sample's secure sum of each device's rows over the catalogue
                           (`dense`); the algorithm's server step on the sum read as one upload (`as_upload`)
    eval                   as a plaintext job: each device's squared error and count of its held-out ratings

A device keeps the state its client step made for a sum until a later round tells it the sum's total holds its
upload (`counted`: the label of the last such sum per device); one whose upload did not count (it left before
uploading, or the sum failed and starts again) keeps the state it had.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coordinator.secure_sums import SecureSums
from models.core.messages import MessageType
from models.core.pipeline import close_round
from models.core.sampling import sample
from models.recsys.messages import Evaluation, RatingSums

#: the secure sums of a training round and of a setup round (AltGDMin's power iterations)
TRAIN, SETUP = "train", "setup"


class PrivateRecsys(SecureSums):
    """The private-mode half of `coordinator.recsys_job.RecsysJob` (used when the job's `private` is set)."""

    spec: Any  # models.recsys.spec.RecsysJobSpec

    def algorithm(self) -> Any:
        raise NotImplementedError

    def private_follow(self) -> None:
        """The next step of the sum in progress, else a failed sum again, else the next training round's sum, else
        the evaluation, else the end."""
        from models.private.relay import STEPS

        if self.next_step():
            return
        done = self.info.get("sums", {})
        if self.phase == "eval":
            self.finish()
        elif done.get(SETUP, 0) < self.algorithm().setup_rounds:  # every participant, as the simulator's setup
            self.begin(f"{SETUP}:{STEPS[0]}", self.round + 1, self.participants)
        elif done.get(TRAIN, 0) < self.spec.rounds:
            assert self.rng is not None
            members = [self.participants[i] for i in sample(self.rng, self.participants, self.spec.fraction)[0]]
            self.begin(f"{TRAIN}:{STEPS[0]}", self.round + 1, members)
        else:
            self.begin("eval", self.round + 1, self.participants)

    def private_reply(self, phase: str) -> MessageType | None:
        return {"stats": RatingSums, "eval": Evaluation}.get(phase) or SecureSums.reply_type(self, phase)

    def private_fields(self, phase: str) -> dict[str, Any]:
        """What a private round message adds: the secure sum's step, and which sum last counted each device's
        upload (a training sum's advertise step, the evaluation)."""
        out: dict[str, Any] = {"private": True, **self.secure_fields(phase)}
        if phase == "eval" or phase == f"{TRAIN}:advertise":
            counted = self.info.get("counted", {})
            out["counted"] = {n: counted[n] for n in self.sampled if n in counted}
        return out

    def announce(self, name: str, rnd: int, members: list[str]) -> Any:
        from models.private.fixedpoint import BITS
        from models.private.relay import Announced
        from models.recsys.private import round_shapes, scales

        alg = self.algorithm()
        shapes = round_shapes(alg, setup=name == SETUP)
        every = scales(alg, int(self.info["most"]))
        seed = int(np.random.default_rng([self.spec.seed, rnd]).integers(2**31))
        return Announced(f"{self.job_id}/{name}/{rnd}", tuple(members), shapes, {k: every[k] for k in shapes}, 1.0,
                         BITS, seed)

    def summed(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        """The server step on the round's sum, read as one upload over the catalogue (the simulator's)."""
        from models.recsys.private import as_upload

        alg = self.algorithm()
        before = self.broadcast["item_factors"]
        upload = as_upload(total, alg.n_items)
        if name == SETUP:  # the setup step changes no device's state
            self.server, self.broadcast = alg.server_setup(self.server, upload)
            return {"item_change": item_change(before, self.broadcast["item_factors"])}
        ids, weights = self.weights(members)
        self.server, self.broadcast = close_round(alg, self.server, ids, upload, weights)
        counted = self.info.setdefault("counted", {})
        for m in members:  # the sum holds their uploads: each device keeps the state it made for it when told
            counted[m] = str(self.info["secagg"]["label"])
        return {"item_change": item_change(before, self.broadcast["item_factors"])}

    def private_stats(self, answered: list[str]) -> None:
        """The most users a device holds (each device's claim, as the mixture's record counts): the clip's bound."""
        users = [self.pending[a].users for a in answered]
        if any(u is None for u in users):
            self.fail("private mode: a device's statistics did not say how many users it holds (an older agent)")
            return
        if len(answered) < 2:
            self.fail(f"{len(answered)} agents answered the statistics phase; private mode sums at least 2")
            return
        self.info["most"] = max(int(u[0]) for u in users if u is not None)


def item_change(before: np.ndarray, after: np.ndarray) -> float:
    """The relative change of the item model (the convergence signal the coordinator can compute)."""
    return float(np.linalg.norm(after - before) / max(np.linalg.norm(before), 1e-12))
