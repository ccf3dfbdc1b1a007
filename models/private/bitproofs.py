"""Bit proofs for the 0/1 rows private mode sums (issue 23 point 3): a device cannot count as a supporter more
than once through a masked sum.

The secure sum hides each upload, so the coordinator cannot see that a device's support row holds 0s and 1s; a
device that breaks the protocol could put 5 there and count as five supporters. Each device therefore also sends,
in the clear, a Pedersen commitment to each entry of its row and a proof that the committed value is 0 or 1, and
puts its commitments' blinding factors into the same secure sum as the row. After unmasking, the coordinator checks
that the sum it decoded is the sum the commitments hold:

    sum_i C_i == (sum_i x_i) G + (sum_i r_i) H        (per entry, over the devices whose uploads are in the sum)

- **Group.** Ed25519's prime-order subgroup (order `ORDER`), through libsodium (PyNaCl, the `private` extra). G is
  the standard base point; H is a nothing-up-my-sleeve point: libsodium's hash-to-curve (`from_uniform`, which
  lands in the prime-order subgroup) of SHA-512 of a fixed domain string, so nobody knows log_G H. A commitment
  C = x G + r H with r uniform modulo the order is perfectly hiding (any x fits any C) and computationally binding
  (opening it two ways gives log_G H). Points from devices are refused unless libsodium accepts them as canonical
  prime-order points (`point`).
- **Proof that x is 0 or 1.** A disjunctive Chaum-Pedersen / Schnorr proof (Cramer, Damgard and Schoenmakers 1994):
  knowledge of log_H C (x = 0) or of log_H (C - G) (x = 1), the other branch simulated, made non-interactive by
  Fiat-Shamir. The challenge hashes the domain, the `context` (job, round, device) and the entry's index with the
  commitment and both announcements, so a proof made for one job, round, device or entry does not verify for
  another (no replay). A proof is 4 scalars (c0, c1, z0, z1), 128 bytes; soundness error 2^-252 per entry.
- **Linking to the masked sum.** Each blinding factor (or its change, a scalar modulo the order) is cut into limbs
  of `limb_bits(ring)` bits, little end first, and the limbs ride in the secure sum as whole numbers (`limb_values`:
  the ring's fixed point holds them exactly). A limb is as wide as one device's room in the ring (its clip times
  2^frac, at most 2^48), so n limbs sum without wrapping for the same reason n clipped values do (`Ring.for_sum`):
  at the 40-bit ring, 32-bit limbs (8 a scalar) at 100 devices of clip 5, 28-bit (10) at 1,000, 25-bit (11) at
  10,000. The coordinator reads the limb sums back as integers and recombines them modulo the order
  (`blinding_sums`).

What it proves, and what not: every entry a device commits to is 0 or 1, and (when the check passes) the decoded
sum of the row is the sum of committed entries. If the check fails, some device masked a value other than the one
it committed to, and nothing says which (the sum hides each upload): the caller must not use that sum's support
counts (models.mixture.summed: the round's support change is withheld). It proves nothing about real-valued
statistics (a clip's validity needs range proofs, not built).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from models.private.fixedpoint import Ring

#: the order of Ed25519's prime-order subgroup (a scalar is an integer modulo it)
ORDER = 2**252 + 27742317777372353535851937790883648493
POINT_BYTES = SCALAR_BYTES = 32
#: a bit proof: c0, c1, z0, z1
PROOF_BYTES = 4 * SCALAR_BYTES
#: the encoding of the group's identity (y = 1): a commitment row starts there (nothing committed, nothing counted)
IDENTITY = b"\x01" + bytes(31)
#: binds H and every challenge to this use
DOMAIN = b"fedsentry/v1/support-bits"
#: the widest limb (limbs travel as ring values divided by 2^frac: float64 holds them exactly below 2^53)
MAX_LIMB_BITS = 48


class ProofError(ValueError):
    """A commitment or proof that does not verify, naming what and where."""


def _nacl() -> Any:
    try:
        from nacl import bindings
    except ImportError:  # pragma: no cover - the message is the point
        raise RuntimeError("the support rows' bit proofs need PyNaCl: pip install 'fedsentry[private]'") from None
    return bindings


def _bytes(n: int) -> bytes:
    return (n % ORDER).to_bytes(SCALAR_BYTES, "little")


def scalar(data: bytes) -> int:
    """A 32-byte little-endian scalar; one not below the order is refused (a proof's scalars are canonical)."""
    n = int.from_bytes(data, "little")
    if len(data) != SCALAR_BYTES or n >= ORDER:
        raise ProofError("a proof scalar is not a canonical 32-byte scalar")
    return n


def random_scalar() -> int:
    """A uniform nonzero scalar (64 random bytes reduced: bias below 2^-250)."""
    while True:
        n = int.from_bytes(os.urandom(64), "little") % ORDER
        if n:
            return n


def base(n: int) -> bytes:
    """n G."""
    n %= ORDER
    return IDENTITY if n == 0 else bytes(_nacl().crypto_scalarmult_ed25519_base_noclamp(_bytes(n)))


def mul(n: int, P: bytes) -> bytes:
    """n P (P a prime-order point or the identity)."""
    n %= ORDER
    if n == 0 or P == IDENTITY:
        return IDENTITY
    return bytes(_nacl().crypto_scalarmult_ed25519_noclamp(_bytes(n), P))


def add(P: bytes, Q: bytes) -> bytes:
    return bytes(_nacl().crypto_core_ed25519_add(P, Q))


def sub(P: bytes, Q: bytes) -> bytes:
    return bytes(_nacl().crypto_core_ed25519_sub(P, Q))


@lru_cache(maxsize=1)
def generator_h() -> bytes:
    """H: libsodium's hash-to-curve of a fixed domain string (nobody knows log_G H)."""
    return bytes(_nacl().crypto_core_ed25519_from_uniform(hashlib.sha512(DOMAIN + b"/H").digest()[:32]))


#: the Ed25519 base point (RFC 8032)
G = bytes.fromhex("58" + "66" * 31)


def point(data: bytes, what: str) -> bytes:
    """A point a device sent, if it is a canonical point of the prime-order subgroup (not the identity nor of small
    order); otherwise a ProofError naming `what`."""
    if len(data) != POINT_BYTES or not _nacl().crypto_core_ed25519_is_valid_point(bytes(data)):
        raise ProofError(f"{what} is not a valid point of the prime-order group")
    return bytes(data)


def commit(x: int, r: int) -> bytes:
    """C = x G + r H."""
    return add(base(x), mul(r, generator_h()))


def context(job: str, round: int | str, device: int | str) -> bytes:
    """What a proof is bound to: the job, the round (or sum) and the device (length-prefixed: no two differ in
    encoding only)."""
    parts = [str(job).encode(), str(round).encode(), str(device).encode()]
    return b"".join(struct.pack(">I", len(p)) + p for p in parts)


def _challenge(ctx: bytes, index: int, C: bytes, A0: bytes, A1: bytes) -> int:
    h = hashlib.sha512(DOMAIN + b"/challenge" + struct.pack(">I", len(ctx)) + ctx + struct.pack(">Q", index)
                       + C + A0 + A1)
    return int.from_bytes(h.digest(), "little") % ORDER


def prove_bit(x: int, r: int, ctx: bytes, index: int) -> bytes:
    """The proof that C = commit(x, r) holds 0 or 1 (x must be 0 or 1: nothing else has a proof)."""
    if x not in (0, 1):
        raise ProofError(f"entry {index} is {x}: only a 0 or a 1 has a bit proof")
    Hp = generator_h()
    C = commit(x, r)
    statements = (C, sub(C, G))  # x = 0: C = r H; x = 1: C - G = r H
    k, c_other, z_other = random_scalar(), random_scalar(), random_scalar()
    A = [b"", b""]
    A[x] = mul(k, Hp)
    A[1 - x] = sub(mul(z_other, Hp), mul(c_other, statements[1 - x]))
    c = _challenge(ctx, index, C, A[0], A[1])
    cs, zs = [0, 0], [0, 0]
    cs[1 - x], zs[1 - x] = c_other, z_other
    cs[x] = (c - c_other) % ORDER
    zs[x] = (k + cs[x] * r) % ORDER
    return b"".join(_bytes(v) for v in (*cs, *zs))


def verify_bit(C: bytes, proof: bytes, ctx: bytes, index: int) -> bool:
    """Whether `proof` shows that the commitment C (a valid point: `point`) holds 0 or 1, for this context and
    index."""
    if len(proof) != PROOF_BYTES:
        return False
    try:
        c0, c1, z0, z1 = (scalar(proof[i: i + SCALAR_BYTES]) for i in range(0, PROOF_BYTES, SCALAR_BYTES))
    except ProofError:
        return False
    Hp = generator_h()
    A0 = sub(mul(z0, Hp), mul(c0, C))
    A1 = sub(mul(z1, Hp), mul(c1, sub(C, G)))
    return (c0 + c1) % ORDER == _challenge(ctx, index, C, A0, A1)


@dataclass
class RowAnswer:
    """What a device sends beside its masked upload for one 0/1 row: a commitment and a bit proof per entry (in the
    clear), and the change of its blinding factors (into the secure sum, as limbs: `limb_values`)."""

    commitments: list[bytes]
    proofs: list[bytes]
    blinding_change: list[int]  # modulo the order, per entry (secret: it travels only masked)

    def wire_bytes(self) -> int:
        """Bytes in the clear (the limbs are counted with the masked upload)."""
        return len(self.commitments) * (POINT_BYTES + PROOF_BYTES)


@dataclass
class SecretRow:
    """A device's side: the 0/1 row its kept commitments hold (after merges: a merged entry may hold 2) and their
    blinding factors. Column merges add entries (commitments are additively homomorphic: the coordinator merges the
    kept commitments alike)."""

    values: list[int]
    blindings: list[int]

    @classmethod
    def empty(cls, length: int) -> SecretRow:
        return cls([0] * length, [0] * length)

    def merge(self, a: int, b: int) -> None:
        """Entry b added into entry a and emptied (models.mixture.swaps.merge_columns)."""
        self.values[a] += self.values[b]
        self.blindings[a] = (self.blindings[a] + self.blindings[b]) % ORDER
        self.values[b] = self.blindings[b] = 0

    def answer(self, bits: Sequence[int], ctx: bytes) -> tuple[RowAnswer, SecretRow]:
        """Commitments to a new row of bits (its first len(bits) entries; the rest kept), their proofs, and the
        blinding change to the kept row; with the row the device keeps once the sum counted it. The value change
        the device masks is bits - values (what the secure sum must add up)."""
        bits = [int(b) for b in bits]
        if len(bits) > len(self.values):
            raise ValueError(f"a row of {len(bits)} entries for a kept row of {len(self.values)}")
        blindings = [random_scalar() for _ in bits]
        commitments = [commit(x, r) for x, r in zip(bits, blindings)]
        proofs = [prove_bit(x, r, ctx, j) for j, (x, r) in enumerate(zip(bits, blindings))]
        change = [(r - r0) % ORDER for r, r0 in zip(blindings, self.blindings)]
        kept = SecretRow(bits + self.values[len(bits):], blindings + self.blindings[len(bits):])
        return RowAnswer(commitments, proofs, change), kept


def verify_row(commitments: Sequence[bytes], proofs: Sequence[bytes], ctx: bytes, length: int) -> list[bytes]:
    """A device's commitments, once every one is a valid point with a verifying bit proof for its index; otherwise
    a ProofError naming the first entry that fails (the caller refuses the device's upload)."""
    if len(commitments) != length or len(proofs) != length:
        raise ProofError(f"{len(commitments)} commitments and {len(proofs)} proofs for a row of {length} entries")
    out = []
    for j, (C, proof) in enumerate(zip(commitments, proofs)):
        C = point(C, f"the commitment of entry {j}")
        if not verify_bit(C, proof, ctx, j):
            raise ProofError(f"the bit proof of entry {j} does not verify (its value is not 0 or 1, or the proof "
                             "was made for another job, round, device or entry)")
        out.append(C)
    return out


@dataclass
class KeptRows:
    """The coordinator's side: each device's last commitment row (hiding: it reveals nothing of the row), with the
    job's column merges applied as the device applies them (lazily, when the device answers again)."""

    length: int
    rows: dict[Any, list[bytes]] = field(default_factory=dict)
    merged: dict[Any, int] = field(default_factory=dict)  # merges each kept row has had
    merges: list[tuple[int, int]] = field(default_factory=list)

    def merge(self, a: int, b: int) -> None:
        self.merges.append((int(a), int(b)))

    def row(self, device: Any) -> list[bytes]:
        """The device's kept row with every merge applied (the identity row before its first answer)."""
        row = self.rows.get(device, [IDENTITY] * self.length)
        for a, b in self.merges[self.merged.get(device, 0):]:
            row = list(row)
            row[a], row[b] = add(row[a], row[b]), IDENTITY
        self.rows[device], self.merged[device] = row, len(self.merges)
        return row

    def change(self, device: Any, commitments: Sequence[bytes]) -> list[bytes]:
        """The commitment to the device's change: new - kept, entry by entry over the new row's length."""
        kept = self.row(device)
        return [sub(C, K) for C, K in zip(commitments, kept)]

    def adopt(self, device: Any, commitments: Sequence[bytes]) -> None:
        """The device's new row, once the sum holding its change counted."""
        kept = self.row(device)
        self.rows[device] = list(commitments) + kept[len(commitments):]


def limb_bits(ring: Ring) -> int:
    """The width of a blinding limb in this ring: one device's room, floor(log2(clip 2^frac)) bits (at most
    MAX_LIMB_BITS), so that n limbs cannot wrap a sum in which n clipped values cannot (`Ring.for_sum`)."""
    return int(min(MAX_LIMB_BITS, np.floor(np.log2(ring.clip)) + ring.frac))


def limbs_per_scalar(ring: Ring) -> int:
    return -(-ORDER.bit_length() // limb_bits(ring))


def limb_values(scalars: Sequence[int], ring: Ring) -> np.ndarray:
    """Each scalar's limbs, little end first, as ring values (limb / 2^frac: encoded exactly, within the clip)."""
    b, m = limb_bits(ring), limbs_per_scalar(ring)
    out = [(int(s) >> (b * j)) & ((1 << b) - 1) for s in scalars for j in range(m)]
    return np.array(out, dtype=float) / float(1 << ring.frac)


def blinding_sums(decoded: np.ndarray, ring: Ring) -> list[int]:
    """The sums of the blinding scalars, modulo the order, from the decoded sum of their `limb_values`; a limb sum
    that is not a whole number is a ProofError (it was not made of limbs)."""
    b, m = limb_bits(ring), limbs_per_scalar(ring)
    whole = np.asarray(decoded, dtype=float) * float(1 << ring.frac)
    if len(whole) % m or np.any(np.abs(whole - np.rint(whole)) > 0) or np.any(whole < 0):
        raise ProofError("the summed blinding limbs are not whole numbers of limbs")
    sums = [int(v) for v in np.rint(whole)]
    return [sum(s << (b * j) for j, s in enumerate(sums[i: i + m])) % ORDER for i in range(0, len(sums), m)]


def sum_mismatches(changes: Sequence[Sequence[bytes]], totals: Sequence[int], blindings: Sequence[int]) -> list[int]:
    """The entries where the devices' change commitments do not add up to the decoded sum: sum_i D_i[j] !=
    totals[j] G + blindings[j] H (empty: the sum is the committed one)."""
    Hp = generator_h()
    bad = []
    for j, (x, r) in enumerate(zip(totals, blindings)):
        acc = IDENTITY
        for row in changes:
            acc = add(acc, row[j])
        if acc != add(base(int(x)), mul(int(r), Hp)):
            bad.append(j)
    return bad
