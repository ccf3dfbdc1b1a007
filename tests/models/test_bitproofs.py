"""The support rows' bit proofs (models.private.bitproofs): a committed 0 or 1 has a verifying proof, nothing else
does, a proof verifies only where it was made, and the coordinator's check of a secure sum against the devices'
commitments finds a device that masked a value other than the one it committed to."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("nacl")
pytest.importorskip("cryptography")

from models.private import bitproofs as bp
from models.private.fixedpoint import Ring
from models.private.secagg import Setup, secure_sum

CTX = bp.context("job-a", 7, 3)


def _forge(x: int, r: int, ctx: bytes, index: int, branch: int) -> bytes:
    """prove_bit's algorithm without its guard: the real branch `branch` answered with r, the other simulated (what
    a device committing to x outside {0, 1} can do best without log_G H)."""
    Hp = bp.generator_h()
    C = bp.commit(x, r)
    statements = (C, bp.sub(C, bp.G))
    k, c_other, z_other = bp.random_scalar(), bp.random_scalar(), bp.random_scalar()
    A = [b"", b""]
    A[branch] = bp.mul(k, Hp)
    A[1 - branch] = bp.sub(bp.mul(z_other, Hp), bp.mul(c_other, statements[1 - branch]))
    c = bp._challenge(ctx, index, C, A[0], A[1])
    cs, zs = [0, 0], [0, 0]
    cs[1 - branch], zs[1 - branch] = c_other, z_other
    cs[branch] = (c - c_other) % bp.ORDER
    zs[branch] = (k + cs[branch] * r) % bp.ORDER
    return b"".join(bp._bytes(v) for v in (*cs, *zs))


def test_the_generators_are_prime_order_points_and_h_is_not_g() -> None:
    assert bp.base(1) == bp.G
    assert bp.point(bp.G, "G") == bp.G
    assert bp.point(bp.generator_h(), "H") != bp.G


@pytest.mark.parametrize("x", [0, 1])
def test_a_committed_bit_has_a_verifying_proof(x: int) -> None:
    r = bp.random_scalar()
    C = bp.commit(x, r)
    assert bp.verify_bit(bp.point(C, "C"), bp.prove_bit(x, r, CTX, 4), CTX, 4)


@pytest.mark.parametrize("x", [2, 5, -1])
def test_a_value_other_than_0_or_1_gets_no_verifying_proof(x: int) -> None:
    r = bp.random_scalar()
    with pytest.raises(bp.ProofError, match="only a 0 or a 1"):
        bp.prove_bit(x, r, CTX, 0)
    C = bp.commit(x, r)
    for branch in (0, 1):  # the prover's algorithm run on it either way fails the challenge
        assert not bp.verify_bit(C, _forge(x, r, CTX, 0, branch), CTX, 0)
    # and the proof of a true bit does not transfer to the commitment of another value with the same blinding
    assert not bp.verify_bit(C, bp.prove_bit(1, r, CTX, 0), CTX, 0)


def test_a_proof_verifies_only_for_its_job_round_device_and_entry() -> None:
    r = bp.random_scalar()
    C, proof = bp.commit(1, r), bp.prove_bit(1, r, CTX, 2)
    assert bp.verify_bit(C, proof, CTX, 2)
    for other, index in ((bp.context("job-b", 7, 3), 2), (bp.context("job-a", 8, 3), 2),
                         (bp.context("job-a", 7, 4), 2), (CTX, 3)):
        assert not bp.verify_bit(C, proof, other, index)


def test_a_tampered_proof_or_commitment_does_not_verify() -> None:
    r = bp.random_scalar()
    C, proof = bp.commit(0, r), bp.prove_bit(0, r, CTX, 0)
    for at in (0, 40, 70, 127):
        bad = bytearray(proof)
        bad[at] ^= 1
        assert not bp.verify_bit(C, bytes(bad), CTX, 0)
    assert not bp.verify_bit(bp.commit(0, r + 1), proof, CTX, 0)
    assert not bp.verify_bit(C, proof[:-1], CTX, 0)
    non_canonical = proof[:32] + bp.ORDER.to_bytes(32, "little") + proof[64:]
    assert not bp.verify_bit(C, non_canonical, CTX, 0)


def test_points_outside_the_prime_order_group_are_refused_by_name() -> None:
    small_order = bytes.fromhex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")  # order 2
    for bad in (bp.IDENTITY, small_order, bytes(31), b"\xff" * 32):
        with pytest.raises(bp.ProofError, match="entry 0 is not a valid point"):
            bp.point(bad, "the commitment of entry 0")


def test_a_row_is_refused_naming_its_first_bad_entry() -> None:
    answer, _ = bp.SecretRow.empty(4).answer([1, 0, 1, 1], CTX)
    assert bp.verify_row(answer.commitments, answer.proofs, CTX, 4) == answer.commitments
    proofs = list(answer.proofs)
    proofs[2] = answer.proofs[3]
    with pytest.raises(bp.ProofError, match="entry 2 does not verify"):
        bp.verify_row(answer.commitments, proofs, CTX, 4)
    with pytest.raises(bp.ProofError, match="3 commitments and 4 proofs for a row of 4"):
        bp.verify_row(answer.commitments[:3], answer.proofs, CTX, 4)
    with pytest.raises(bp.ProofError, match="entry 0 does not verify"):  # replayed into another round
        bp.verify_row(answer.commitments, answer.proofs, bp.context("job-a", 8, 3), 4)


@pytest.mark.parametrize("devices,clip", [(2, 1.0), (100, 5.0), (1000, 5.0), (2**15, 1.0)])
def test_blinding_limbs_sum_exactly_and_cannot_wrap(devices: int, clip: float) -> None:
    ring = Ring.for_sum(clip, devices)
    b = bp.limb_bits(ring)
    assert (1 << b) <= ring.clip * (1 << ring.frac)  # one limb fits a device's room: n of them cannot wrap
    rng = np.random.default_rng(devices)
    scalars = [int.from_bytes(rng.bytes(32), "little") % bp.ORDER for _ in range(3)] + [bp.ORDER - 1]
    one = ring.encode(bp.limb_values(scalars, ring))
    assert np.all(ring.decode(one) * (1 << ring.frac) < (1 << b))  # each limb encoded exactly, not clipped
    assert devices * ((1 << b) - 1) < 2 ** (ring.bits - 1)  # the largest limb from every device does not wrap
    total = np.zeros_like(one)
    for _ in range(min(devices, 64)):
        total = ring.add(total, one)
    sums = bp.blinding_sums(ring.decode(total), ring)
    assert sums == [(min(devices, 64) * s) % bp.ORDER for s in scalars]


def _round(ring: Ring, rows: dict[int, bp.SecretRow], kept: bp.KeptRows, bits: dict[int, list[int]],
           label: str, lie: dict[int, list[int]] | None = None, gone: frozenset[int] = frozenset()
           ) -> tuple[list[int], dict[int, bp.SecretRow]]:
    """One secure sum of the devices' support changes with their proofs: (mismatched entries, the rows kept)."""
    length = kept.length
    answers, after, changes, values = {}, {}, {}, {}
    for i, row in rows.items():
        ctx = bp.context("job", label, i)
        answers[i], after[i] = row.answer(bits[i], ctx)
        commitments = bp.verify_row(answers[i].commitments, answers[i].proofs, ctx, length)  # on arrival
        changes[i] = kept.change(i, commitments)
        masked = (lie or {}).get(i, bits[i])  # what the device puts in the sum
        dx = np.array(masked, dtype=float) - np.array(row.values[:length], dtype=float)
        values[i] = np.concatenate([dx, bp.limb_values(answers[i].blinding_change, ring)])
    setup = Setup(label.encode(), tuple(rows), len(next(iter(values.values()))), ring, 5)
    total, uploaded, _ = secure_sum(setup, values, gone_after_upload=gone)
    totals = np.rint(total[:length]).astype(int)
    bad = bp.sum_mismatches([changes[i] for i in sorted(uploaded)], totals.tolist(),
                            bp.blinding_sums(total[length:], ring))
    if not bad:
        for i in uploaded:
            kept.adopt(i, answers[i].commitments)
        rows = {**rows, **{i: after[i] for i in uploaded}}
    return bad, rows


def test_the_sum_check_passes_for_honest_devices_with_dropouts_and_merges() -> None:
    n, length = 9, 5
    ring = Ring.for_sum(4.0, n)
    rng = np.random.default_rng(0)
    rows = {i: bp.SecretRow.empty(length) for i in range(n)}
    kept = bp.KeptRows(length)
    bits = {i: rng.integers(0, 2, length).tolist() for i in range(n)}
    bad, rows = _round(ring, rows, kept, bits, "r1", gone=frozenset({1, 4, 6}))  # a third gone after upload
    assert bad == []
    kept.merge(0, 3)  # a swap's merge, made by both sides
    for row in rows.values():
        row.merge(0, 3)
    bits = {i: rng.integers(0, 2, length).tolist() for i in range(n)}
    bad, rows = _round(ring, rows, kept, bits, "r2")
    assert bad == []


def test_the_sum_check_fails_when_one_device_masks_other_than_it_committed() -> None:
    n, length = 6, 4
    ring = Ring.for_sum(8.0, n)
    rows = {i: bp.SecretRow.empty(length) for i in range(n)}
    kept = bp.KeptRows(length)
    bits = {i: [1, 0, 1, 0] for i in range(n)}
    bad, after = _round(ring, rows, kept, bits, "r1", lie={2: [5, 0, 1, 0]})  # commits 1, masks 5
    assert bad == [0]
    # nothing adopted: the devices keep their rows and the coordinator its (empty) commitments
    assert after == rows and all(r == [bp.IDENTITY] * length for r in kept.rows.values())
    bad, _ = _round(ring, rows, kept, bits, "r1", lie={2: [1, 0, 1, -1]})  # a supporter fewer is caught too
    assert bad == [3]
