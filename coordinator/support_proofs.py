"""A private mixture job's support rows proven 0 or 1 over MQTT (`algorithm_params.support_proofs`; the protocol
is models.private.proven's, whose functions both sides call as the simulator's do):

- announce: a seeding or EM sum also sums each device's blinding limbs (`limbs_name`, scale 1);
- advertise: each device's commitments and bit proofs ride in its advertisement, checked on arrival: a device whose
  proofs fail is refused by name (the round's influence record) and the sum goes on without it; the commitments
  of those that advertised are kept in the job's state (`PENDING`) until the sum is decoded;
- after unmasking: the devices in the sum (those gone after their upload included) must hold, in their commitment
  changes against the kept rows, the decoded sum of the support changes and of the limbs. If so they become the
  kept rows (`KEPT`, saved with the round: a coordinator restarted mid-sum finds them as the last round left them,
  and decodes the sum once); if not, the sum's support changes are withheld (models.mixture.summed.WITHHELD:
  counted in the server state and the round's metrics) and each device is told in its next advertisement
  (`withheld`), to keep its row as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coordinator.secure_sums import step_of
from models.mixture.spec import SUPPORT_PROOFS
from models.mixture.summed import WITHHELD
from wire.protocol import ProtocolError

#: the server-state keys of the kept commitment rows, and of the sum in progress' commitments (by position)
KEPT, PENDING = "proofs.kept.", "proofs.sum."
#: the sums whose devices prove their support rows (the mixture's seeding and EM rounds)
PROVEN_SUMS = ("seed", "train")


class SupportProofs:
    """The coordinator's side of the support proofs (mixed into coordinator.mixture_job.MixtureJob)."""

    spec: Any
    server: dict[str, np.ndarray]
    broadcast: dict[str, np.ndarray]
    info: dict[str, Any]
    phase: str
    job_id: str

    def proves(self, name: str) -> bool:
        """Whether the sum `name` carries support proofs (a private job that asks for them, its seeding and EM)."""
        return bool(self.spec.private and self.spec.algorithm_params.get(SUPPORT_PROOFS)) and name in PROVEN_SUMS

    def with_limbs(self, announced: Any) -> Any:
        """The announcement with the blinding limbs of the support row beside its change."""
        from dataclasses import replace

        from models.private import bitproofs as bp
        from models.private.fixedpoint import Ring
        from models.private.proven import limbs_name

        ring = Ring.for_sum(announced.clip, len(announced.names), announced.bits)
        n = int(np.prod(announced.shapes["dH"], dtype=np.int64)) * bp.limbs_per_scalar(ring)
        return replace(announced, shapes={**announced.shapes, limbs_name("dH"): (n,)},
                       scales={**announced.scales, limbs_name("dH"): 1.0})

    def check_proofs(self, msg: Any, sender: str) -> None:
        """A proven sum's advertisement: its commitments and bit proofs verify (models.private.bitproofs.verify_row,
        bound to this job, sum and device), else a ProtocolError naming the entry that fails."""
        from models.private import bitproofs as bp
        from models.private.proven import points

        at = step_of(self.phase)
        if at is None or at[1] != "advertise" or not self.proves(at[0]):
            return
        if msg.commitments is None or msg.proofs is None:
            raise ProtocolError("value", "support proofs: this sum's advertisement carries the support row's "
                                "commitments and bit proofs, and this one has none")
        label, length = str(self.info["secagg"]["label"]), int(np.prod(self.info["secagg"]["shapes"]["dH"]))
        try:
            bp.verify_row(points(msg.commitments), points(msg.proofs), bp.context(self.job_id, label, sender), length)
        except bp.ProofError as e:
            raise ProtocolError("value", f"support proofs: {e}") from None

    def keep_commitments(self, name: str, replies: dict[int, Any]) -> None:
        """The advertised commitments of a proven sum, by position, in the job's state until the sum is decoded."""
        if not self.proves(name):
            return
        ids = sorted(replies)
        self.server[PENDING + "ids"] = np.array(ids, dtype=np.int64)
        self.server[PENDING + "rows"] = np.array([np.asarray(replies[i].commitments, np.uint8) for i in ids],
                                                 dtype=np.uint8)

    def check_sum(self, name: str, total: dict[str, np.ndarray], members: list[str], index: dict[str, int],
                  slots: int) -> dict[str, np.ndarray]:
        """After unmasking a proven sum: the total without the limbs, its support changes withheld (WITHHELD) unless
        the commitments of the devices in it hold them; the kept rows (`slots` entries a row) updated if they do."""
        from models.private.fixedpoint import Ring
        from models.private.proven import kept_arrays, kept_rows, limbs_name, points, sum_holds
        from models.private.relay import Announced

        if not self.proves(name):
            return total
        announced = Announced.from_meta(self.info["secagg"])
        position = {n: i for i, n in enumerate(announced.names)}
        held = dict(zip((int(i) for i in self.server.pop(PENDING + "ids")), self.server.pop(PENDING + "rows")))
        saved = {k[len(KEPT):]: v for k, v in self.server.items() if k.startswith(KEPT)}
        kept = kept_rows(slots, saved, self.broadcast.get("merges", np.zeros((0, 2))))
        new = {index[m]: points(held[position[m]]) for m in members}
        changes = [kept.change(i, new[i]) for i in sorted(new)]
        ring = Ring.for_sum(announced.clip, len(announced.names), announced.bits)
        limbs = total.pop(limbs_name("dH"))
        if sum_holds(changes, total["dH"][0], limbs[0], ring):
            for i, row in new.items():
                kept.adopt(i, row)
            self.server.update({KEPT + k: v for k, v in kept_arrays(kept).items()})
            return total
        self.info.setdefault("withheld", []).append(announced.label)
        return {**total, "dH": np.zeros_like(total["dH"]), WITHHELD: np.ones(1)}

    def withheld_labels(self, counted: dict[str, str]) -> list[str]:
        """The labels among `counted` whose support changes were withheld (each device keeps its row as before)."""
        withheld = set(self.info.get("withheld", []))
        return sorted({label for label in counted.values() if label in withheld})
