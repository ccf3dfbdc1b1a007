"""Differential privacy in PCA jobs (issue 23, point 4) through the coordinator's job runner and the agents'
participants, without a broker (tests/integration/test_private_job.py's loopback): the model, the threshold and the
budget spent equal `simulate_pca(..., dp=...)` with the same seed, through devices dropping after their upload and a
coordinator restarted in the middle of a noisy sum; the noise is really there (a job without it is another model);
settings that make no sense are refused by name."""

from __future__ import annotations

import re

import numpy as np
import pytest

from models.families import job_spec
from models.params import SettingError
from models.pca.simulator import simulate_pca
from models.private.dp import device_key
from store.db import unpack
from tests.integration.test_loopback import pca_participants
from tests.integration.test_private_job import RANK, SEED, PrivateLoopback, fleet  # noqa: F401 (a fixture)

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")
pytest.importorskip("dp_accounting", reason="differential privacy's budget needs dp-accounting (the dev extra)")

EPSILON = 8.0


def keyed(participants: list) -> list:
    """Participants whose noise streams are the simulator's (device i keyed (seed, 4242, i)) instead of their own
    secrets, so that the job can be compared with the simulation."""
    for i, p in enumerate(participants):
        p.noise_key = lambda job, i=i: device_key(SEED, i)
    return participants


def dp_settings(names) -> dict:
    return {"features": names, "rank": RANK, "seed": SEED, "private": True, "dp_epsilon": EPSILON}


def simulated(fleet, **kw) -> dict:  # noqa: F811
    names, parts, test, y = fleet
    from models.private.accounting import Budget

    central = kw.pop("central", False)
    return simulate_pca(parts, test, y, names, rank=RANK, seed=SEED, private=not central, dp=Budget(EPSILON), **kw)


def assert_same_budget(job: dict, sim: dict, skip: tuple[str, ...] = ()) -> None:
    """The job's `dp` block is the simulator's: the same keys, numbers to 1e-9."""
    assert set(job) == set(sim)
    for k in set(sim) - set(skip):
        assert job[k] == (pytest.approx(sim[k], rel=1e-9) if isinstance(sim[k], float) else sim[k]), k


def record_announced(monkeypatch) -> list[dict]:
    """What each device reads in the noisy sums' round messages (the `dp` announcement), recorded."""
    from edge_agent.detector_participant import DetectorParticipant

    announced: list[dict] = []
    noisy_values = DetectorParticipant.noisy_values
    monkeypatch.setattr(DetectorParticipant, "noisy_values",
                        lambda self, name, req, dp: (announced.append(dp), noisy_values(self, name, req, dp))[1])
    return announced


def test_a_dp_pca_job_equals_the_simulators_distributed_noise_through_dropouts_and_a_restart(tmp_path, fleet,  # noqa: F811
                                                                                             monkeypatch):
    announced = record_announced(monkeypatch)
    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, dp_settings(names), keyed(pca_participants(tmp_path, names, parts)),
                           silent=lambda phase: ("dev-01", "dev-04") if phase.endswith(":unmask") else ())
    # a coordinator restarted between the share and upload steps of the moments' sum: the devices' noise is the same
    assert loop.run(restart_after="moments:share") == "finished", loop.error()
    sums = [p.partition(":")[0] for p in loop.phases if p.endswith(":advertise")]
    assert sums == ["mean", "centred", "moments", "anchor", "threshold"]
    sim = simulated(fleet, dropout=1 / 3)
    mv = loop.model()
    Z = unpack(mv.arrays)["Z"]
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert mv.info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    dp = mv.info["dp"]
    assert_same_budget(dp, sim["dp"], skip=("clipped_uploads",))  # the devices clip: the coordinator cannot count
    assert dp["noise"] == "distributed" and 0 < dp["epsilon_spent"] <= EPSILON and dp["clipped_uploads"] is None
    # the round messages announced the simulator's multiplier and clip norms, and each sum's index in the job
    assert {a["multiplier"] for a in announced} == {sim["dp"]["noise_multiplier"]}
    assert {k: v for a in announced for k, v in a["clips"].items()} == sim["dp"]["clip_norms"]
    assert sorted({a["index"] for a in announced}) == [0, 1, 2, 3, 4]


def test_a_noisy_sum_asked_again_after_a_failed_attempt_carries_the_same_noise(tmp_path, fleet):  # noqa: F811
    """Four devices miss the first attempt's upload of the mean: the sum starts again with fresh keys, and each
    device adds the same share of the noise as the first time (its stream is keyed by the sum, not the attempt): the
    job is still the simulator's."""
    names, parts, _, _ = fleet
    failed: list[int] = []

    def silent(phase):
        if phase == "mean:upload" and not failed:
            failed.append(1)
            return ("dev-00", "dev-01", "dev-02", "dev-03")
        return ()

    loop = PrivateLoopback(tmp_path, dp_settings(names), keyed(pca_participants(tmp_path, names, parts)),
                           silent=silent)
    assert loop.run() == "finished", loop.error()
    assert loop.phases.count("mean:advertise") == 2
    sim = simulated(fleet)
    Z = unpack(loop.model().arrays)["Z"]
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert loop.model().info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    assert loop.model().info["dp"]["sums"] == {"all_devices": 5, "sampled": 0}  # the failed attempt released nothing


def test_a_noisy_sum_decoded_with_too_few_uploads_fails_the_job_its_noise_is_short(tmp_path, fleet):  # noqa: F811
    """Each of the 6 devices adds 1/4 of the noise's variance (a sum completes with as few as 4 uploads); 3 devices
    leaving before their upload leave a sum the secure sum can decode with 3/4 of the noise: the job fails, saying
    so, rather than release it."""
    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, dp_settings(names), keyed(pca_participants(tmp_path, names, parts)),
                           silent=lambda phase: ("dev-00", "dev-01", "dev-02") if phase == "moments:upload" else ())
    assert loop.run() == "failed"
    assert "noisy sum 'moments': 3 of 6 devices uploaded; their noise shares fall short of the target (at least 4" \
        in loop.error()
    assert loop.runner.info["dp"]["released"] == 2  # the mean and the centred sums only


def test_a_central_dp_pca_job_equals_the_simulators_central_noise_through_a_restart_mid_sum(tmp_path, fleet,  # noqa: F811
                                                                                          monkeypatch):
    """Central noise: the devices send their values in the clear, the coordinator clips, sums and adds the noise from
    its generator, saved with the job after each sum. Keyed as the simulator's (seed, 4242) for the comparison (a job
    keys it with a secret); a coordinator restarted while the moments' sum is open closes it with the same noise."""
    import coordinator.noisy_detector as noisy

    monkeypatch.setattr(noisy, "central_key", lambda: [SEED, 4242])
    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, {**dp_settings(names), "private": False},
                           pca_participants(tmp_path, names, parts))
    assert loop.run(until="moments:clear") == "moments:clear", loop.error()
    before = loop.runner.info["dp"]["rng"]

    def killed(*_):  # the coordinator dies after drawing the moments' noise, before its state is saved
        raise RuntimeError("killed")

    loop.runner.save = killed
    with pytest.raises(RuntimeError, match="killed"):
        loop.step()
    assert loop.runner.info["dp"]["rng"] != before  # the noise was drawn
    loop.restart()  # the restarted coordinator asks the moments' sum again, from the generator's saved state
    while loop.runner.phase not in ("finished", "failed"):
        loop.step()
    assert loop.runner.phase == "finished", loop.error()
    assert loop.phases == ["stats", "mean:clear", "centred:clear", "moments:clear", "moments:clear", "anchor:clear",
                           "threshold:clear"]
    sim = simulated(fleet, central=True)
    mv = loop.model()
    Z = unpack(mv.arrays)["Z"]
    np.testing.assert_allclose(Z @ Z.T, sim["Z"] @ sim["Z"].T, atol=1e-6)
    assert mv.info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    assert_same_budget(mv.info["dp"], sim["dp"])
    assert mv.info["dp"]["noise"] == "central"


def test_a_sum_in_the_clear_refuses_values_that_are_not_its_own_naming_them(tmp_path, fleet):  # noqa: F811
    from models.core.messages import Upload
    from wire.messages import envelope
    from wire.protocol import ProtocolError

    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, {**dp_settings(names), "private": False}, pca_participants(tmp_path, names, parts))
    assert loop.run(until="mean:clear") == "mean:clear", loop.error()
    for arrays, says in [({"m2": np.zeros(4)}, "the sum 'mean' takes ['m1']"),
                         ({"m1": np.zeros(3)}, "m1 must be (4,) finite values"),
                         ({"m1": np.array([0.0, np.inf, 0.0, 0.0])}, "m1 must be (4,) finite values")]:
        bad = envelope(Upload(arrays=arrays), "loop", loop.runner.round, "dev-00")
        with pytest.raises(ProtocolError, match=re.escape(says)):
            loop.runner.accept(bad)


def test_the_noise_is_there_the_same_job_without_it_is_another_model(tmp_path, fleet):  # noqa: F811
    """The noise at epsilon 8 over 6 devices moves the standardisation far more than 1e-6: a job whose devices skipped
    their shares could not pass the test above."""
    names, parts, _, _ = fleet
    plain = PrivateLoopback(tmp_path, {**dp_settings(names), "dp_epsilon": None},
                            pca_participants(tmp_path, names, parts))
    assert plain.run(until="centred:advertise") == "centred:advertise", plain.error()
    noisy = PrivateLoopback(tmp_path / "n", dp_settings(names), keyed(pca_participants(tmp_path / "n", names, parts)))
    assert noisy.run(until="centred:advertise") == "centred:advertise", noisy.error()
    assert np.max(np.abs(np.array(noisy.runner.info["mean"]) - np.array(plain.runner.info["mean"]))) > 1e-2


def test_dp_job_settings_that_make_no_sense_are_refused_naming_the_setting():
    base = {"features": ["a", "b", "c"], "rank": 1, "private": True, "algorithm": "fedmm"}
    for bad, field, says in [({"dp_epsilon": 0.0}, "dp_epsilon", "(0, 100]"),
                             ({"dp_epsilon": -1.0}, "dp_epsilon", "(0, 100]"),
                             ({"dp_epsilon": 1.0, "dp_delta": 0.0}, "dp_delta", "(0, 0.01)"),
                             ({"dp_epsilon": 1.0, "dp_delta": 1.0}, "dp_delta", "(0, 0.01)"),
                             ({"dp_epsilon": 1.0, "algorithm": "fedpg"}, "algorithm", "fedmm")]:
        with pytest.raises(SettingError) as e:
            job_spec("pca", {**base, **bad})
        assert e.value.field == field and says in str(e.value), (bad, e.value)
    # (gmm's: tests/integration/test_dp_gmm_job.py)


def test_job_create_takes_a_budget_and_names_a_bad_one(tmp_path, capsys):
    from fedsentry.cli import main

    db = f"sqlite:///{tmp_path}/jobs.db"
    base = ["job", "create", "--db", db, "--type", "pca", "--features", "a,b,c,d", "--rank", "2",
            "--algorithm", "fedmm"]
    assert main([*base, "--dp-epsilon", "0"]) == 2
    assert "--dp-epsilon: must be in (0, 100]" in capsys.readouterr().err
    assert main([*base, "--dp-epsilon", "2", "--dp-delta", "1"]) == 2
    assert "--dp-delta: must be in (0, 0.01)" in capsys.readouterr().err
    assert main([*base, "--dp-epsilon", "2", "--dp-delta", "1e-6", "--private"]) == 0
    from store.db import Job, make_engine, session_factory

    with session_factory(make_engine(db))() as s:
        params = s.query(Job).one().params
    assert params["dp_epsilon"] == 2 and params["dp_delta"] == 1e-6 and params["private"] is True
