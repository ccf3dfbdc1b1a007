"""Private PCA and gmm jobs (issue 23) through the coordinator's job runner and the agents' participants, without a
broker: every message a real encoded envelope, the shares each device receives on its own topic. The model equals the
simulator's private mode with the same seed, with devices that drop after their masked upload and a coordinator
restarted between two steps of a secure sum; too few uploads fail the job naming why; an agent without the
`private` extra declines saying what to install, and the job goes on without it."""

from __future__ import annotations

import numpy as np
import pytest

from models.core.messages import Decline
from models.families import family, job_spec
from models.mixture.simulator import simulate_mixture
from models.pca.simulator import simulate_pca
from store.db import Job as JobRow
from store.db import JobState, ModelVersion, Round, make_engine, migrate, session_factory, unpack
from store.jobs import create_job
from tests.integration.test_loopback import pca_participants
from wire.messages import envelope
from wire.protocol import ProtocolError, decode

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")

N, RANK, SEED = 6, 2, 4
ALGORITHM = {"pca": "fedmm", "gmm": "fedem"}


class PrivateLoopback:
    """A job runner and its participants, messages passed as bytes by topic; `silent(phase)` names the devices
    that do not answer a round of that phase (its deadline then closes it)."""

    def __init__(self, tmp, settings: dict, participants: list, silent=lambda phase: (), kind: str = "pca",
                 without_extra: tuple[str, ...] = (), algorithm: str | None = None, refusing: bool = False):
        engine = make_engine(f"sqlite:///{tmp}/loop.db")
        migrate(engine)
        self.sessions = session_factory(engine)
        self.kind = kind
        create_job(self.sessions, "loop", job_spec(kind, {**settings, "algorithm": algorithm or ALGORITHM[kind]}))
        self.participants, self.silent = {p.id: p for p in participants}, silent
        self.without_extra = without_extra  # devices without the `private` extra (cryptography)
        self.extra = "cryptography"  # the module of the extra they lack
        self.refusing = refusing  # an answer refused on arrival leaves the round going on (else the test fails)
        self.outbox: list[tuple[str, bytes]] = []
        self.runner = self.make_runner()
        self.phases: list[str] = []

    def make_runner(self):
        with self.sessions() as s:
            row = s.get(JobRow, "loop")
        return family(self.kind).load_runner()(row, self.sessions, lambda t, p, r: self.outbox.append((t, p)),
                                           "fedsentry/v1/jobs/loop/round")

    def restart(self) -> None:
        """A new coordinator process: the runner rebuilt from the database, the retained messages gone."""
        self.outbox.clear()
        self.runner = self.make_runner()
        self.runner.start(sorted(self.participants))

    def step(self) -> None:
        """Deliver what was published (the round message last), then close the round."""
        published, self.outbox = self.outbox, []
        phase = self.runner.phase
        self.phases.append(phase)
        quiet = set(self.silent(phase))
        for topic, payload in published:
            if not payload:
                continue
            env = decode(payload)
            if topic.endswith("/secagg"):
                name = topic.split("/")[-2]
                reply = None if name in quiet else self.participants[name].on_routed(env)
                self.answer(reply)
            else:
                for name, p in self.participants.items():
                    if name not in quiet:
                        self.answer(self.deliver(p, env))
        if quiet:
            self.runner.deadline = 0.0
        self.runner.tick()

    def deliver(self, p, env):
        """A round message to a participant; what it cannot take part in it declines, saying why (as the agent)."""
        import sys

        saved = sys.modules.get(self.extra)
        if p.id in self.without_extra:
            sys.modules[self.extra] = None  # type: ignore[assignment]
        try:
            return p.on_round(env)
        except ValueError as e:
            return envelope(Decline(reason=str(e)), env.job, env.round, p.id)
        finally:
            if p.id in self.without_extra:
                if saved is None:
                    sys.modules.pop(self.extra, None)
                else:
                    sys.modules[self.extra] = saved

    def answer(self, reply) -> None:
        if reply is None:
            return
        try:
            self.runner.accept(decode(reply.encode()))
        except ProtocolError:  # refused on arrival (the round's influence record), as the coordinator's service
            if not self.refusing:
                raise

    def run(self, restart_after=None, until=None) -> str:
        """Run the job to its end (or until it reaches the phase `until`), the coordinator restarted once the phase
        `restart_after` closed (a phase's name, or a test of it)."""
        self.runner.start(sorted(self.participants))
        while self.runner.phase not in ("finished", "failed", until):
            before = self.runner.phase
            at = restart_after(before) if callable(restart_after) else before == restart_after
            self.step()
            if at and self.runner.phase != before:
                restart_after = None
                self.restart()
        return self.runner.phase

    def model(self) -> ModelVersion:
        with self.sessions() as s:
            return s.query(ModelVersion).filter_by(job_id="loop").one()

    def error(self) -> str:
        with self.sessions() as s:
            return str(s.get(JobRow, "loop").error)


@pytest.fixture(scope="module")
def fleet():
    """Non-i.i.d. devices of different sizes (each stretches another direction), and test records."""
    rng = np.random.default_rng(2)
    mix = np.array([[1.0, 0.9, 0.0, 0.1], [0.0, 0.2, 1.0, 0.5], [0.3, 0.0, 0.1, 1.0], [0.1, 0.1, 0.1, 0.1]])
    parts = [np.abs(rng.normal(size=(40 + 30 * i, 4)) * (1 + 4 * np.eye(4)[i % 4]) @ mix) * 100 for i in range(N)]
    test = np.vstack([np.abs(rng.normal(size=(50, 4)) @ mix) * 100, rng.uniform(0, 1e5, size=(10, 4))])
    return ["a", "b", "c", "d"], parts, test, np.r_[np.zeros(50), np.ones(10)]


def settings(names) -> dict:
    return {"features": names, "rank": RANK, "seed": SEED, "private": True}


def simulated(fleet) -> dict:
    names, parts, test, y = fleet
    return simulate_pca(parts, test, y, names, rank=RANK, seed=SEED, private=True, dropout=1 / 3)


def assert_same_model(mv: ModelVersion, sim: dict) -> None:
    Z = unpack(mv.arrays)["Z"]
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert mv.info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)


def test_a_private_pca_job_equals_the_simulators_private_mode_through_dropouts_and_a_restart(tmp_path, fleet):
    names, parts, _, _ = fleet
    # dev-01 and dev-04 vanish after their masked upload of each sum: their values still count
    loop = PrivateLoopback(tmp_path, settings(names), pca_participants(tmp_path, names, parts),
                           silent=lambda phase: ("dev-01", "dev-04") if phase.endswith(":unmask") else ())
    # a coordinator restarted between the share and upload steps of the moments' sum
    assert loop.run(restart_after="moments:share") == "finished", loop.error()
    assert loop.phases[:5] == ["stats", "mean:advertise", "mean:share", "mean:upload", "mean:unmask"]
    assert loop.phases[-1] == "threshold:unmask"
    # the restarted coordinator re-sent each device its routed shares; the devices re-sent the same masked upload
    assert loop.phases.count("moments:upload") == 1 and loop.phases.count("moments:share") == 1
    assert_same_model(loop.model(), simulated(fleet))
    with loop.sessions() as s:  # the saved state after the job: no sum in progress, nothing of one upload
        st = s.get(JobState, "loop")
        assert not [k for k in unpack(st.server) if k.startswith("secagg.")] and "secagg" not in st.info


def test_a_sum_with_too_few_uploads_starts_again_with_fresh_keys(tmp_path, fleet):
    names, parts, _, _ = fleet
    failed: list[int] = []

    def silent(phase):  # four devices miss the first attempt's upload step only
        if phase == "mean:upload" and not failed:
            failed.append(loop.runner.round)
            return ("dev-00", "dev-01", "dev-02", "dev-03")
        return ()

    loop = PrivateLoopback(tmp_path, settings(names), pca_participants(tmp_path, names, parts), silent=silent)
    assert loop.run(until="centred:advertise") == "centred:advertise", loop.error()
    assert loop.phases[1:] == ["mean:advertise", "mean:share", "mean:upload",  # failed: started again
                               "mean:advertise", "mean:share", "mean:upload", "mean:unmask"]
    with loop.sessions() as s:
        rounds = s.query(Round).filter_by(job_id="loop").order_by(Round.round).all()
    assert "2 devices uploaded; a secure sum needs at least" in rounds[3].metrics["failed"]
    assert rounds[3].metrics["attempt"] == 1 and rounds[7].metrics["survivors"] == N
    assert loop.runner.info["mean"]  # the second attempt's sum counted


def test_a_sum_that_keeps_failing_fails_the_job_naming_the_sum_and_why(tmp_path, fleet):
    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, settings(names), pca_participants(tmp_path, names, parts),
                           silent=lambda phase: ("dev-00", "dev-01", "dev-02", "dev-03")
                           if phase == "mean:upload" else ())
    assert loop.run() == "failed"
    assert loop.phases.count("mean:advertise") == 3
    assert "secure sum 'mean' failed at its upload step: 2 devices uploaded; a secure sum needs at least" \
        in loop.error() and "(3 attempts)" in loop.error()
    cleared = [t for t, p in loop.outbox if t.endswith("/secagg") and not p]  # no routed shares left retained
    assert len(cleared) == N


def test_an_agent_without_the_private_extra_declines_and_the_job_goes_on_without_it(tmp_path, fleet):
    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, settings(names), pca_participants(tmp_path, names, parts),
                           without_extra=("dev-05",))
    assert loop.run(until="mean:share") == "mean:share", loop.error()
    with loop.sessions() as s:
        stats = s.query(Round).filter_by(job_id="loop", phase="stats").one()
        mean = s.query(Round).filter_by(job_id="loop", phase="mean:advertise").one()
    assert "pip install 'fedsentry[private]'" in stats.metrics["declined"]["dev-05"]
    assert "dev-05" not in mean.sampled and len(mean.sampled) == N - 1


def swapping_fleet(seed: int = 3) -> list[np.ndarray]:
    """Devices that all hold six groups (log-scaled: two near, two far apart with nothing between, two more), where
    a private job of four components makes a swap in its fifth k-means round."""
    rng = np.random.default_rng(seed)
    centres = [(3.0, 3.0), (3.3, 3.0), (1.0, 6.0), (7.0, 6.0), (3.0, 9.0), (8.0, 1.0)]
    return [np.expm1(np.vstack([rng.normal(c, 0.15, (30 + 5 * i, 2)) for c in centres])) for i in range(N)]


@pytest.mark.parametrize("swapping", [False, True], ids=["no-swap", "swap"])
def test_a_private_gmm_job_equals_the_simulators_private_mode_with_devices_dropping_after_upload(tmp_path, fleet,
                                                                                                  swapping):
    """...and with a swap (models.mixture.swaps): the coordinator merges the pair in its sums, each agent in its own
    contribution before its next change, as the simulator's devices do; a coordinator restarted in the middle of the
    next sum still lists the merge."""
    names, parts, _, _ = fleet
    rounds, fraction, params = 3, 0.5, {"components": 3}
    if swapping:  # a swap ends round 5 (the last it may end at 7 rounds of half the devices)
        names, parts, rounds, params = ["a", "b"], swapping_fleet(), 7, {"components": 4}
    participants = pca_participants(tmp_path, names, parts, "gmm")
    loop = PrivateLoopback(tmp_path, {"features": names, "seed": SEED, "private": True, "rounds": rounds,
                                      "fraction": fraction, "algorithm_params": params},
                           participants, silent=lambda phase: ("dev-02",) if phase.endswith(":unmask") else (),
                           kind="gmm")
    restart = (lambda phase: phase == "train:share" and int(loop.runner.server.get("swaps", 0)) == 1) if swapping \
        else None
    first = loop.runner
    assert loop.run(restart_after=restart) == "finished", loop.error()
    assert (loop.runner is not first) == swapping  # restarted (after the swap)
    phases = [p for p in loop.phases if p.endswith(":advertise")]
    assert phases[:3] == ["mean:advertise", "centred:advertise", "seed:advertise"]
    assert phases.count("train:advertise") == rounds and phases[-2:] == ["window:advertise", "threshold:advertise"]
    X = np.vstack(parts)
    sim = simulate_mixture(parts, X, np.zeros(len(X)), names, "fedem", rounds, fraction, seed=SEED, params=params,
                           private=True, dropout=1 / 3)
    stored, m = unpack(loop.model().arrays), sim["detector"].mixture_
    assert phases.count("seed:advertise") == sim["all_device_rounds"]  # as many seeding rounds, every device
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-6)
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    # (the same float32 records and the same rounding on both sides: 1e-6 of every factor, not of the largest)
    np.testing.assert_allclose(stored["prec_chol"], m.prec_chol, rtol=1e-6, atol=1e-6)
    assert loop.model().info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    assert int(loop.runner.server.get("swaps", 0)) == int(swapping)
    if swapping:  # every round message since lists the merge, and the agents made it in their own contributions
        assert loop.runner.broadcast["merges"].shape == (1, 2)
    total = contributions(loop, participants, params["components"])  # the sums: the devices' contributions
    for k in ("R", "S1", "S2", "H", "Q"):
        np.testing.assert_allclose(loop.runner.server["support" if k == "H" else k], total[k], atol=1e-6)


def test_a_device_leaving_before_its_upload_keeps_the_contribution_the_sums_hold(tmp_path, fleet):
    """The summed FedEM's server holds the sum of every device's last contribution; a device that computed a new one
    for an EM sum and left before uploading it must keep its old one, or the sums and the devices part for good."""
    names, parts, _, _ = fleet
    left: list[tuple[int, str]] = []  # (round, device)

    def silent(phase):  # the first device asked to the first EM sum's upload step leaves before it
        if phase != "train:upload":
            return ()
        if not left:
            left.append((loop.runner.round, loop.runner.sampled[0]))
        return (left[0][1],) if left[0][0] == loop.runner.round else ()

    participants = pca_participants(tmp_path, names, parts, "gmm")
    loop = PrivateLoopback(tmp_path, {"features": names, "seed": SEED, "private": True, "rounds": 2, "fraction": 0.5,
                                      "algorithm_params": {"components": 2}}, participants, silent=silent, kind="gmm")
    assert loop.run() == "finished", loop.error()
    total = contributions(loop, participants, 2)
    assert left and left[0][1] in loop.runner.info["counted"]  # it took part in the seeding, then left one EM sum
    for k in ("R", "S1", "S2"):
        np.testing.assert_allclose(loop.runner.server[k], total[k], atol=1e-6)


def contributions(loop: PrivateLoopback, participants: list, K: int) -> dict:
    """The sum of each device's contribution as the coordinator's sums should hold it: the one it made for the last
    sum that counted it, with the merges of the job's swaps it has yet to make."""
    from models.mixture.summed import merged

    counted = loop.runner.info["counted"]
    total = {k: 0.0 for k in ("R", "S1", "S2", "H", "Q")}
    for p in participants:
        pending = p.store.load_arrays("pending-loop") or {}
        label = bytes(pending.pop("__pending_label__", np.zeros(0, np.uint8))).decode()
        state = pending if pending and counted.get(p.id) == label else p.load_state("loop")[0]
        state = merged(state, loop.runner.broadcast)[0]
        for k in total:
            total[k] = total[k] + state[k][0][:K]
    return total


def test_private_job_settings_are_checked_naming_the_setting():
    from models.params import SettingError

    with pytest.raises(SettingError) as e:
        job_spec("pca", {"features": ["a", "b", "c"], "rank": 1, "private": True, "algorithm": "fedpg"})
    assert e.value.field == "algorithm"
    with pytest.raises(SettingError) as e:
        job_spec("gmm", {"features": ["a", "b"], "private": True, "categorical": ["proto"]})
    assert e.value.field == "categorical" and "numeric features only" in str(e.value)


class Inflating:
    """The simulator's support-inflate rogue as an agent: its masked support change is INFLATE times its own
    (models.detection.attacks.inflate_support, the simulator's function), its proofs those of what it masks."""

    def summed_step(self, req):
        from models.detection.attacks import inflate_support

        return inflate_support(super().summed_step(req))  # type: ignore[misc]


class NonBit:
    """The simulator's support-nonbit rogue as an agent: its masked support change NONBIT times its own
    (models.detection.attacks.nonbit_support, the simulator's function), committed to as it is (its proofs made by
    models.private.proven.prove_change as the simulator's rogue's: `commits_as_is`)."""

    def summed_step(self, req):
        from models.detection.attacks import nonbit_support

        return nonbit_support(super().summed_step(req))  # type: ignore[misc]


def commits_as_is(monkeypatch, device: str) -> None:
    """`device` proves its support rows as the simulator's support-nonbit rogue (prove_change's as_is)."""
    from models.private import bitproofs as bp
    from models.private import proven

    honest = proven.prove_change

    def prove_change(row, change, ctx, as_is=False):
        return honest(row, change, ctx, as_is or device.encode() in ctx)

    assert b"dev-00" in bp.context("loop", "train-1", "dev-00")
    monkeypatch.setattr(proven, "prove_change", prove_change)


def proven_job(tmp_path, names, parts, rounds, params, rogue: type | None = None, restart: bool = False):
    """A private gmm job with support proofs (dev-02 silent at every unmask of more than 2 devices: gone after its
    upload, as the simulator's dropout of a third drops none of 2), dev-00 a rogue
    (`rogue`: its agent's mixin, Inflating or NonBit) if given, the coordinator restarted in the middle of the sum
    after the first swap if `restart`; the loop, run to its end."""
    from edge_agent.mixture_participant import MixtureParticipant

    participants = pca_participants(tmp_path, names, parts, "gmm")
    if rogue is not None:
        p = participants[0]
        participants[0] = type("Rogue", (rogue, MixtureParticipant), {})(p.id, p.store, p.buffer)
    loop = PrivateLoopback(tmp_path, {"features": names, "seed": SEED, "private": True, "rounds": rounds,
                                      "fraction": 0.5, "algorithm_params": {**params, "support_proofs": True}},
                           participants, silent=lambda phase: ("dev-02",) if phase.endswith(":unmask") and
                           len(loop.runner.sampled) > 2 else (), kind="gmm", refusing=True)
    after_swap = lambda phase: phase == "train:share" and int(loop.runner.server.get("swaps", 0)) == 1  # noqa: E731
    first = loop.runner
    assert loop.run(restart_after=after_swap if restart else None) == "finished", loop.error()
    assert (loop.runner is not first) == restart
    return loop, participants


def test_an_agent_without_pynacl_declines_a_proven_sum_saying_what_to_install(tmp_path):
    participants = pca_participants(tmp_path, ["a", "b"], swapping_fleet(), "gmm")
    loop = PrivateLoopback(tmp_path, {"features": ["a", "b"], "seed": SEED, "private": True, "rounds": 2,
                                      "fraction": 0.5, "algorithm_params": {"components": 2, "support_proofs": True}},
                           participants, kind="gmm", without_extra=("dev-05",))
    loop.extra = "nacl"
    assert loop.run(until="seed:share") == "seed:share", loop.error()
    assert "dev-05" not in loop.runner.sampled and "dev-05" in loop.runner.participants
    with loop.sessions() as s:
        seed = s.query(Round).filter_by(job_id="loop", phase="seed:advertise").one()
    assert "PyNaCl: pip install 'fedsentry[private]'" in seed.metrics["declined"]["dev-05"]


def kept_commitments_hold_the_devices_rows(loop, participants) -> None:
    """The coordinator's kept commitment rows (as restored from its saved state) are each device's own proven row,
    committed with its own blinding factors (none for a device no sum counted), and the summed support the rows'
    sum."""
    from coordinator.support_proofs import KEPT
    from models.mixture.summed import merged
    from models.private import bitproofs as bp
    from models.private.proven import kept_rows, merged_row, row_of

    server, broadcast = loop.runner.server, loop.runner.broadcast
    saved = {k[len(KEPT):]: v for k, v in server.items() if k.startswith(KEPT)}
    kept = kept_rows(len(server[KEPT + "rows"][0]), saved, broadcast.get("merges", np.zeros((0, 2))))
    counted, rows = loop.runner.info["counted"], []
    for i, p in enumerate(participants):
        pending, label = p.pending_state("loop")
        state = pending if pending and counted.get(p.id) == label else p.load_state("loop")[0]
        if state is None:  # no sum ever held its upload (refused at each): no row kept, its own empty
            assert i not in kept.rows, p.id
            continue
        if state is pending and label in loop.runner.info.get("withheld", []):  # told at its next advertisement
            state = {**state, "H": state["H.kept"], "proof.values": state["proof.kept"],
                     "proof.blindings": state["proof.kept.blindings"]}
        done = int(state["merged"][0])
        row = merged_row(row_of(state["proof.values"][0], state["proof.blindings"][0]),
                         np.asarray(broadcast.get("merges", np.zeros((0, 2))), dtype=np.int64)[done:].tolist())
        assert kept.row(i) == [bp.commit(x, r) for x, r in zip(row.values, row.blindings)], p.id
        np.testing.assert_array_equal(row.values, merged(state, broadcast)[0]["H"][0])
        rows.append(row.values)
    K = len(server["support"])
    np.testing.assert_array_equal(server["support"], np.sum(rows, axis=0)[:K])


def test_a_private_gmm_job_with_support_proofs_equals_the_simulators_through_a_swap_and_a_restart(tmp_path):
    """Issue 23 point 3 over the job's rounds: every device's support row proven 0/1 with the simulator's functions;
    the coordinator restarted in the middle of the sum after the swap finds its kept commitment rows as saved, and
    the model is the simulator's with the proofs (none refused, none withheld)."""
    names, parts, rounds, params = ["a", "b"], swapping_fleet(), 7, {"components": 4}
    loop, participants = proven_job(tmp_path, names, parts, rounds, params, restart=True)
    X = np.vstack(parts)
    sim = simulate_mixture(parts, X, np.zeros(len(X)), names, "fedem", rounds, 0.5, seed=SEED, params=params,
                           private=True, dropout=1 / 3, support_proofs=True)
    assert sim["support_proofs"]["sums_withheld"] == 0 and sim["support_proofs"]["refused"] == 0
    stored, m = unpack(loop.model().arrays), sim["detector"].mixture_
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-6)
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    assert loop.model().info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    assert int(loop.runner.server["swaps"]) == 1 and "withheld" not in loop.runner.server
    assert float(loop.runner.server["support"].sum()) == pytest.approx(sim["supporters_counted"])
    kept_commitments_hold_the_devices_rows(loop, participants)


def test_a_device_masking_five_times_its_support_change_gets_its_sums_withheld_as_in_the_simulator(tmp_path):
    """The simulator's support-inflate rogue as an agent (dev-00): the sums it is in do not match the commitments,
    their support changes are withheld (counted in the server state, the round's metrics) exactly as the simulator
    withholds them, the devices keep their rows as the sums hold them, and the model is the simulator's."""
    from models.detection.attacks import Adversaries

    names, parts, rounds, params = ["a", "b"], swapping_fleet(), 7, {"components": 4}
    loop, participants = proven_job(tmp_path, names, parts, rounds, params, rogue=Inflating)
    X = np.vstack(parts)
    sim = simulate_mixture(parts, X, np.zeros(len(X)), names, "fedem", rounds, 0.5, seed=SEED, params=params,
                           private=True, dropout=1 / 3, support_proofs=True,
                           adversaries=Adversaries(1, "support-inflate"))
    withheld = int(loop.runner.server.get("withheld", 0))
    assert withheld == sim["support_proofs"]["sums_withheld"] > 0 and sim["support_proofs"]["refused"] == 0
    assert len(loop.runner.info["withheld"]) == withheld
    with loop.sessions() as s:
        metrics = [r.metrics for r in s.query(Round).filter_by(job_id="loop").all()]
    assert sum(m.get("support_withheld", 0) for m in metrics) == withheld
    assert not [m for m in metrics if "refused" in m.get("influence", {})]  # its proofs verify: it commits to bits
    assert float(loop.runner.server["support"].sum()) == pytest.approx(sim["supporters_counted"])
    stored, m = unpack(loop.model().arrays), sim["detector"].mixture_
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-6)
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    kept_commitments_hold_the_devices_rows(loop, participants)


def test_a_device_committing_to_non_bits_is_refused_as_often_as_in_the_simulator(tmp_path, monkeypatch):
    """The simulator's support-nonbit rogue as an agent (dev-00): in a sum where its row changes no bit proof of its
    verifies, and the coordinator refuses it, as often as the simulator refuses it; its state stays the one before
    (an agent drops the state it kept aside, the simulator's device keeps its own: models.core.rounds.Hooks.counted),
    so the sums it is counted in afterwards and the model are the simulator's, and every kept row the devices' own."""
    from models.detection.attacks import Adversaries

    names, parts, rounds, params = ["a", "b"], swapping_fleet(), 7, {"components": 4}
    commits_as_is(monkeypatch, "dev-00")
    loop, participants = proven_job(tmp_path, names, parts, rounds, params, rogue=NonBit)
    X = np.vstack(parts)
    sim = simulate_mixture(parts, X, np.zeros(len(X)), names, "fedem", rounds, 0.5, seed=SEED, params=params,
                           private=True, dropout=1 / 3, support_proofs=True,
                           adversaries=Adversaries(1, "support-nonbit"))
    with loop.sessions() as s:
        metrics = [r.metrics for r in s.query(Round).filter_by(job_id="loop").all()]
    refused = [m["influence"]["refused"] for m in metrics if "refused" in m.get("influence", {})]
    assert sim["support_proofs"]["sums_withheld"] == 0 and "withheld" not in loop.runner.server
    assert len(refused) == sim["support_proofs"]["refused"] > 0
    assert all(list(r) == ["dev-00"] and "does not verify" in r["dev-00"] for r in refused)
    assert all(w.startswith("device 0, ") for w in sim["support_proofs"]["refused_why"])
    assert float(loop.runner.server["support"].sum()) == pytest.approx(sim["supporters_counted"])
    stored, m = unpack(loop.model().arrays), sim["detector"].mixture_
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-6)
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    assert loop.model().info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    kept_commitments_hold_the_devices_rows(loop, participants)


def test_a_device_whose_support_proof_fails_is_refused_by_name_and_the_sum_goes_on(tmp_path, monkeypatch):
    """dev-03's first bit proof altered in the first EM sum's advertisement: the coordinator refuses that
    advertisement naming the entry (the round's influence record), the sum goes on without dev-03, and the job
    finishes with every kept row still the devices' own."""
    from models.private import bitproofs as bp

    honest, forged = bp.SecretRow.answer, []

    def answer(self, bits, ctx):
        out, after = honest(self, bits, ctx)
        if b"/train/" in ctx and b"dev-03" in ctx and not forged:
            forged.append(ctx)
            out.proofs[1] = out.proofs[1][:-1] + bytes([out.proofs[1][-1] ^ 1])
        return out, after

    monkeypatch.setattr(bp.SecretRow, "answer", answer)
    loop, participants = proven_job(tmp_path, ["a", "b"], swapping_fleet(), 4, {"components": 3})
    assert forged
    with loop.sessions() as s:
        rounds = s.query(Round).filter_by(job_id="loop").order_by(Round.round).all()
    refused = [(r.phase, r.metrics["influence"]["refused"]) for r in rounds
               if "refused" in r.metrics.get("influence", {})]
    assert refused == [("train:advertise", {"dev-03": "value: support proofs: the bit proof of entry 1 does not verify "
                                            "(its value is not 0 or 1, or the proof was made for another job, round, "
                                            "device or entry)"})]
    at = next(i for i, r in enumerate(rounds) if "refused" in r.metrics.get("influence", {}))
    assert rounds[at + 1].phase == "train:share" and "dev-03" not in rounds[at + 1].sampled  # the sum goes on
    assert rounds[at + 3].phase == "train:unmask" and "dev-03" not in rounds[at + 3].sampled
    assert "withheld" not in loop.runner.server
    kept_commitments_hold_the_devices_rows(loop, participants)


@pytest.mark.parametrize(("kind", "settings", "why"), [
    ("gmm", {"private": False}, "support proofs check private mode's masked support rows: set private"),
    ("gmm", {"private": True, "dp_epsilon": 4.0}, "without dp_epsilon"),
    ("gmm", {"private": True, "algorithm_params": {"support_proofs": "yes"}}, "expected bool"),
    ("pca", {"private": True, "rank": 1}, "not a parameter of fedmm"),
])
def test_support_proofs_are_refused_by_name_outside_private_gmm_jobs(kind, settings, why):
    from models.params import SettingError

    features = ["a", "b", "c"]
    body = {"features": features, "algorithm": ALGORITHM[kind], "algorithm_params": {"support_proofs": True},
            **settings}
    with pytest.raises(SettingError, match=why) as e:
        job_spec(kind, body)
    assert e.value.field == "algorithm_params.support_proofs"
    spec = job_spec("gmm", {"features": features, "private": True, "algorithm_params": {"support_proofs": True}})
    assert spec.algorithm_params == {"support_proofs": True}  # a private gmm job takes it
