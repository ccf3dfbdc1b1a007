"""Private mode's support rows proven 0/1 (models.private.proven through models.private.transport): honest devices
pass every check and train the same model; a device that masks 5 times its support change moves no support count;
a device whose proof fails is refused by name and the sum goes on without it."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("nacl")
pytest.importorskip("cryptography")

from models.core.federated import State
from models.core.rounds import BatchedPool, Hooks, Rounds, simulate
from models.detection.attacks import Adversaries, nonbit_support
from models.mixture.simulator import device_data, simulate_mixture
from models.mixture.summed import GROW, SummedFedEM, summed_transport
from models.private import bitproofs as bp
from models.private.proven import ProvenRows, prove_change
from tests.models.test_private_fedem import devices  # the same non-i.i.d. fleet

pytestmark = pytest.mark.filterwarnings("ignore")


def test_honest_devices_pass_every_check_and_train_the_same_model() -> None:
    X = devices(10)
    y = np.r_[np.zeros(50), np.ones(10)]
    test = np.vstack([np.random.default_rng(5).normal(0, 0.5, size=(50, 3)),
                      np.random.default_rng(6).normal(12, 0.5, size=(10, 3))])
    params = {"components": 4, "min_support": 2}
    runs = [simulate_mixture(X, test, y, ["a", "b", "c"], rounds=8, fraction=0.5, params=params, private=True,
                             dropout=0.3, support_proofs=proofs) for proofs in (False, True)]
    plain, proven = runs
    report = proven["support_proofs"]
    assert report["sums_checked"] == len(proven["history"]) and report["sums_withheld"] == 0
    assert report["refused"] == 0 and proven["swaps"] >= 1  # a swap's merge made on both sides of the proofs
    assert proven["supporters_counted"] == plain["supporters_counted"] > 0
    assert proven["auc_roc"] == plain["auc_roc"] and proven["shared_components"] == plain["shared_components"]
    assert proven["upload_bytes_per_device_round"] > plain["upload_bytes_per_device_round"]
    with pytest.raises(ValueError, match="add --private"):
        simulate_mixture(X, test, y, ["a", "b", "c"], rounds=2, fraction=0.5, params=params, support_proofs=True)
    with pytest.raises(ValueError, match="private mode's"):
        simulate_mixture(X, test, y, ["a", "b", "c"], rounds=2, fraction=0.5, params=params,
                         adversaries=Adversaries(1, "support-inflate"))


def train(X: list[np.ndarray], proofs: bool, adversaries: Adversaries, rounds: int = 8, seed: int = 0,
          kept: list[State] | None = None) -> tuple[Rounds, BatchedPool, ProvenRows | None]:
    """The summed FedEM's rounds (no swaps) through the secure sum, with or without the proofs; `kept` collects
    every device's state after each round (the pool's)."""
    alg = SummedFedEM(3, components=4, reg=1e-3, splits=0, min_support=2)
    claimed = np.array([len(x) for x in X], dtype=float)
    loop = Rounds.start(alg, len(X), 0.5, np.random.default_rng(seed))
    loop.server.update({"cap.level": np.array(claimed.max()), "cap.scale": np.array(claimed.mean())})
    loop.broadcast = alg.with_caps(loop.server, loop.broadcast)
    pool = BatchedPool.of(alg, {**device_data(X, seed), "claimed": claimed}, loop.broadcast)
    transport = summed_transport(float(claimed.max() / claimed.mean()), seed, 0.0)
    transport.proven = ProvenRows("dH", 4) if proofs else None
    chaos = np.random.default_rng(1)
    hooks = Hooks(receive=transport, tamper=lambda ids, b: adversaries.tamper(adversaries.among(ids), b, chaos),
                  counted=transport.counted,
                  observe=None if kept is None else lambda ids, done: kept.append(copy.deepcopy(pool.states)))
    simulate(loop, pool, claimed, rounds, hooks, everyone_while=lambda b: int(b["stage"]) == GROW)
    return loop, pool, transport.proven


def test_a_device_masking_five_times_its_support_change_moves_no_count() -> None:
    X = devices(8)
    inflate = Adversaries(1, "support-inflate")
    loop, pool, _ = train(X, False, inflate)
    rows = pool.states["H"]  # each device's own 0/1 row (the attacker's too: it lies only in its upload)
    assert not np.allclose(loop.server["support"], rows.sum(axis=0))  # without the proofs it counts 5 times
    loop, pool, proven = train(X, True, inflate)
    assert proven is not None and proven.withheld > 0 and proven.refused == []
    assert float(loop.server["withheld"]) == proven.withheld  # counted in the server state (the influence record)
    # every count is the devices' own rows: the attacker counts once where it supports, as the commitments hold
    np.testing.assert_array_equal(loop.server["support"], pool.states["H"].sum(axis=0))
    np.testing.assert_array_equal(pool.states["H"].sum(axis=0),
                                  np.sum([proven.devices.get(i, bp.SecretRow.empty(4)).values for i in range(8)],
                                         axis=0))


def test_a_device_whose_proof_fails_is_refused_by_name_and_the_sum_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = bp.SecretRow.answer
    forger = bp.context("simulation", "1", 2)

    def answer(self: bp.SecretRow, bits: list[int], ctx: bytes) -> tuple[bp.RowAnswer, bp.SecretRow]:
        out, after = honest(self, bits, ctx)
        if ctx == forger:  # device 2's first proof altered (as a device committing to 5 must: none verifies)
            out.proofs[1] = out.proofs[1][:-1] + bytes([out.proofs[1][-1] ^ 1])
        return out, after

    monkeypatch.setattr(bp.SecretRow, "answer", answer)
    transport = summed_transport(2.0, 0, 0.0)
    transport.proven = ProvenRows("dH", 3, "simulation")
    ids = np.arange(5)
    dH = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 1], [1, 0, 0], [0, 0, 1]], dtype=float)
    uploads = {"dR": np.full((5, 3), 0.1), "dS1": np.zeros((5, 3, 2)), "dS2": np.zeros((5, 3, 3)), "dH": dH,
               "dN": np.ones(5)}
    out = transport(ids, uploads)
    assert transport.proven.refused == ["device 2, sum 1: the bit proof of entry 1 does not verify (its value is not 0 "
                                        "or 1, or the proof was made for another job, round, device or entry)"]
    np.testing.assert_array_equal(out["dH"][0], dH[[0, 1, 3, 4]].sum(axis=0))  # the others' sum, checked
    assert float(out["dN"][0]) == 4 and "dH.withheld" not in out
    np.testing.assert_array_equal(transport.counted(ids), [0, 1, 3, 4])  # device 2 keeps its state as it was


def test_a_refused_device_keeps_its_state_and_the_sums_hold_every_devices_contribution(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As over MQTT (an agent drops the state it kept aside for a sum that does not hold its upload): a device refused
    on arrival keeps the state it had before the round, and the coordinator's running sums stay the sum of every
    device's kept contribution (R, S1, S2, support) through the rounds after, its own honest answers included."""
    honest, forged = bp.SecretRow.answer, []

    def answer(self: bp.SecretRow, bits: list[int], ctx: bytes) -> tuple[bp.RowAnswer, bp.SecretRow]:
        out, after = honest(self, bits, ctx)
        if ctx == bp.context("simulation", "2", 3):  # device 3's proof in the second (seeding) sum altered
            forged.append(ctx)
            out.proofs[0] = out.proofs[0][:-1] + bytes([out.proofs[0][-1] ^ 1])
        return out, after

    monkeypatch.setattr(bp.SecretRow, "answer", answer)
    kept: list[State] = []
    loop, pool, proven = train(devices(8), True, Adversaries(), rounds=10, kept=kept)
    assert forged and proven is not None and [r.split(":")[0] for r in proven.refused] == ["device 3, sum 2"]
    assert proven.withheld == 0 and len(kept) == proven.checked  # every other sum counted
    for k, v in kept[1].items():  # its state after the refused sum is the one before it; the others' moved on
        np.testing.assert_array_equal(v[3], kept[0][k][3], err_msg=k)
    assert not np.array_equal(kept[1]["R"][2], kept[0]["R"][2])
    K = loop.algorithm.components
    for name in ("R", "S1", "S2"):
        np.testing.assert_allclose(loop.server[name], pool.states[name].sum(axis=0)[:K], atol=1e-5,
                                   err_msg=name)  # (up to the secure sum's fixed point)
    np.testing.assert_array_equal(loop.server["support"], pool.states["H"].sum(axis=0)[:K])
    np.testing.assert_array_equal(proven.devices[3].values, pool.states["H"][3])  # its proven row is its own


def test_a_device_committing_to_what_it_masks_as_it_is_has_no_proof_where_its_row_changes_twice() -> None:
    """support-nonbit's proving (prove_change as_is): its row plus twice its change is -1 or 2 where the row changes,
    committed to as it is; only those entries' proofs fail, and an honest device's are the same either way."""
    row, ctx = bp.SecretRow([1, 0, 1, 0], [bp.random_scalar() for _ in range(4)]), bp.context("j", "1", 0)
    change = nonbit_support({"dH": np.array([[0.0, 1.0, -1.0, 0.0]])})["dH"][0]
    answer, after = prove_change(row, change, ctx, as_is=True)
    assert after.values == [1, 2, -1, 0]
    with pytest.raises(bp.ProofError, match="entry 1 does not verify"):
        bp.verify_row(answer.commitments, answer.proofs, ctx, 4)
    for j in range(4):
        assert bp.verify_bit(bp.point(answer.commitments[j], "C"), answer.proofs[j], ctx, j) == (j in (0, 3))
    honest, _ = prove_change(row, np.array([0.0, 1.0, -1.0, 0.0]), ctx, as_is=True)
    assert len(bp.verify_row(honest.commitments, honest.proofs, ctx, 4)) == 4
