"""One upload name's 0/1 rows proven through a secure sum (models.private.bitproofs), in a simulation: both sides of
the proofs for `models.private.transport.SecureTransport` (`proven`).

The upload under `name` is the change of each device's cumulative 0/1 row (a private mixture's support row, `dH`:
models.mixture.summed), and the job's column merges add entries of every row (a swap's merge). Per sum:

- device side (`answer`): each device's row after the merges it has not made, plus its change, is its new row; it
  commits to each entry with a bit proof bound to (job, sum, device, entry), and its blinding factors' change
  joins its masked upload as limbs (`limbs`);
- coordinator side: each device's proofs checked on arrival (a device whose proofs fail is refused by name and
  counted, and the sum goes on without it); after unmasking (`check`), its kept commitment rows (merged as the
  devices merge theirs) and the new ones must add up to the decoded sum of the changes and of the limbs, over the
  devices whose uploads are in it (those gone after their upload included). If they do not, a device masked
  another value than it committed to, and no one can say which: the sum's row changes are withheld (`check`
  returns False; the caller leaves them out of its counts and every device of the sum keeps its row as before),
  and counted.

A device's row here is what the kept commitments hold; a device in simulation commits to its row as its protocol
gives it (its upload's change on its kept row, read as a bit: an honest device's is one already; one that masks 5
where its row holds 1 commits to the 1, which is all it can prove).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from models.private import bitproofs as bp
from models.private.fixedpoint import Ring


@dataclass
class ProvenRows:
    """Both sides of the bit proofs of the rows uploaded under `name` (their changes), `length` entries a row."""

    name: str
    length: int
    job: str = "simulation"
    devices: dict[int, bp.SecretRow] = field(default_factory=dict)  # each device's own (secret) row
    device_merged: dict[int, int] = field(default_factory=dict)
    kept: bp.KeptRows = field(init=False)
    refused: list[str] = field(default_factory=list)  # why each refused device was refused
    checked: int = 0  # sums checked
    withheld: int = 0  # sums whose check failed: their row changes withheld
    device_cpu: list[float] = field(default_factory=list)  # the slowest device's proving, per sum
    server_cpu: list[float] = field(default_factory=list)  # the coordinator's verifying and checking, per sum
    _pending: dict[int, tuple[bp.RowAnswer, bp.SecretRow, list[bytes]]] = field(default_factory=dict)
    #: devices that commit to their row plus the change they mask as it is (support-nonbit's: `prove_change`)
    as_is: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        self.kept = bp.KeptRows(self.length)

    def sync(self, merges: np.ndarray) -> None:
        """The job's column merges so far (a broadcast's `merges`): both sides make the new ones."""
        pairs = np.asarray(merges, dtype=np.int64).reshape(-1, 2)
        for a, b in pairs[len(self.kept.merges):]:
            self.kept.merge(int(a), int(b))

    def _row(self, device: int) -> bp.SecretRow:
        row = merged_row(self.devices.get(device) or bp.SecretRow.empty(self.length),
                         self.kept.merges[self.device_merged.get(device, 0):])
        self.devices[device], self.device_merged[device] = row, len(self.kept.merges)
        return row

    def answer(self, sum_label: str, ids: np.ndarray, changes: np.ndarray) -> list[int]:
        """Each device's commitments and proofs, checked on arrival: the devices admitted to the sum (the others
        refused, named in `refused`)."""
        admitted, slowest, t_server = [], 0.0, 0.0
        self._pending = {}
        for i, change in zip((int(i) for i in ids), np.asarray(changes, dtype=float)):
            t = time.process_time()
            ctx = bp.context(self.job, sum_label, i)
            answer, after = prove_change(self._row(i), change, ctx, i in self.as_is)
            slowest = max(slowest, time.process_time() - t)
            t = time.process_time()
            try:
                commitments = bp.verify_row(answer.commitments, answer.proofs, ctx, len(change))
            except bp.ProofError as e:
                self.refused.append(f"device {i}, sum {sum_label}: {e}")
            else:
                self._pending[i] = (answer, after, self.kept.change(i, commitments))
                admitted.append(i)
            t_server += time.process_time() - t
        self.device_cpu.append(slowest)
        self.server_cpu.append(t_server)
        return admitted

    def limbs(self, device: int, ring: Ring) -> np.ndarray:
        """The device's blinding change as limbs, for its masked upload."""
        return bp.limb_values(self._pending[device][0].blinding_change, ring)

    def clear_bytes(self, device: int) -> int:
        """What the device sent in the clear (its commitments and proofs)."""
        return self._pending[device][0].wire_bytes()

    def check(self, uploaded: set[int], totals: np.ndarray, limb_total: np.ndarray, ring: Ring) -> bool:
        """Whether the decoded sum of the changes (`totals`) and of the limbs is what the commitments of the devices
        in the sum hold; if so each of them keeps its new row (both sides), otherwise the sum is counted as withheld
        and every row stays as it was."""
        t = time.process_time()
        self.checked += 1
        ok = sum_holds([self._pending[i][2] for i in sorted(uploaded)], totals, limb_total, ring)
        if ok:
            for i in uploaded:
                answer, after, _ = self._pending[i]
                self.kept.adopt(i, answer.commitments)
                self.devices[i] = after
        else:
            self.withheld += 1
        self._pending = {}
        self.server_cpu[-1] += time.process_time() - t
        return ok

    def report(self) -> dict[str, object]:
        """What the simulation's JSON records of the proofs."""
        return {"sums_checked": self.checked, "sums_withheld": self.withheld, "refused": len(self.refused),
                "refused_why": self.refused[:10],
                "device_cpu_seconds_max": float(max(self.device_cpu, default=0.0)),
                "coordinator_cpu_seconds_median": float(np.median(self.server_cpu)) if self.server_cpu else 0.0}


def merged_row(row: bp.SecretRow, merges: Sequence[Sequence[int]]) -> bp.SecretRow:
    """A device's row with the job's column merges it has not made yet (`merges`: those since), in order."""
    for a, b in merges:
        row.merge(int(a), int(b))
    return row


def prove_change(row: bp.SecretRow, change: np.ndarray, ctx: bytes,
                 as_is: bool = False) -> tuple[bp.RowAnswer, bp.SecretRow]:
    """A device's side of one sum: its kept row plus the change it masks, read as bits (an honest device's are bits
    already; one that masks 5 where its row holds 1 commits to the 1, all it can prove), committed and proven; with
    the row it keeps once the sum counted it.

    as_is (the support-nonbit rogue's, models.detection.attacks): the device commits to its row plus its change as
    they are; an entry other than 0 or 1 has no bit proof, and it sends the proof of the bit nearest (the only proof
    it can make), which does not verify."""
    values = np.rint(np.asarray(row.values[: len(change)], dtype=float) + np.asarray(change, dtype=float))
    answer, after = row.answer(np.clip(values, 0, 1).astype(int).tolist(), ctx)
    for j in np.flatnonzero((values < 0) | (values > 1)) if as_is else []:
        answer.commitments[j] = bp.commit(int(values[j]), after.blindings[j])
        after.values[j] = int(values[j])
    return answer, after


def sum_holds(changes: Sequence[Sequence[bytes]], totals: np.ndarray, limb_total: np.ndarray, ring: Ring) -> bool:
    """The coordinator's check after unmasking: the decoded sum of the row changes (`totals`, whole numbers) and of
    the blinding limbs (`limb_total`) is what the change commitments of the devices in the sum (`changes`) hold."""
    totals = np.asarray(totals, dtype=float)
    whole = np.rint(totals)
    try:
        blindings = bp.blinding_sums(limb_total, ring)
        return bool(np.all(whole == totals)) and not bp.sum_mismatches(changes, whole.astype(int).tolist(), blindings)
    except bp.ProofError:
        return False


def limbs_name(name: str) -> str:
    """The upload name of the blinding limbs of the rows uploaded under `name` (in the same secure sum)."""
    return f"{name}.limbs"


def points(rows: np.ndarray) -> list[bytes]:
    """Rows of bytes (commitments or proofs, as a message or a saved state carries them) as a list of bytes."""
    return [bytes(r) for r in np.asarray(rows, dtype=np.uint8)]


def as_rows(items: Sequence[bytes], width: int) -> np.ndarray:
    """Byte strings of one width as a uint8 array of rows (what messages and saved states carry)."""
    return np.frombuffer(b"".join(items), np.uint8).reshape(len(items), width).copy()


def row_arrays(row: bp.SecretRow) -> dict[str, np.ndarray]:
    """A device's secret row as arrays for its own disk (values, blinding factors as 32-byte scalars)."""
    return {"values": np.asarray(row.values, dtype=np.int64),
            "blindings": as_rows([int(r).to_bytes(bp.SCALAR_BYTES, "little") for r in row.blindings],
                                 bp.SCALAR_BYTES)}


def row_of(values: np.ndarray, blindings: np.ndarray) -> bp.SecretRow:
    return bp.SecretRow([int(v) for v in values], [int.from_bytes(b, "little") for b in points(blindings)])


def kept_arrays(kept: bp.KeptRows) -> dict[str, np.ndarray]:
    """The coordinator's kept commitment rows as arrays for the job's saved state (devices by their ids)."""
    ids = sorted(kept.rows)
    rows = np.stack([as_rows(kept.rows[i], bp.POINT_BYTES) for i in ids]) if ids else \
        np.zeros((0, kept.length, bp.POINT_BYTES), np.uint8)
    return {"ids": np.array(ids, dtype=np.int64), "rows": rows,
            "merged": np.array([kept.merged.get(i, 0) for i in ids], dtype=np.int64)}


def kept_rows(length: int, arrays: dict[str, np.ndarray], merges: np.ndarray) -> bp.KeptRows:
    """The kept commitment rows a job saved (`kept_arrays`; none before its first proven sum), with every merge of
    the job's swaps so far (`merges`: its broadcast's), each applied to a row when its device answers again."""
    kept = bp.KeptRows(length)
    kept.merges = [(int(a), int(b)) for a, b in np.asarray(merges, dtype=np.int64).reshape(-1, 2)]
    if arrays:
        for i, row, m in zip(arrays["ids"], arrays["rows"], arrays["merged"]):
            kept.rows[int(i)], kept.merged[int(i)] = points(row), int(m)
    return kept
