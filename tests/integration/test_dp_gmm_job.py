"""Differential privacy in gmm jobs (issue 23, point 4) through the coordinator's job runner and the agents'
participants, without a broker (tests/integration/test_private_job.py's loopback): the summed FedEM's seeding and EM
rounds are noisy sums too. The model, the threshold and the budget spent equal `simulate_mixture(..., dp=...)` with
the same seed, distributed (devices dropping after their upload, a coordinator restarted in the middle of a noisy
EM sum) and central (a coordinator killed after drawing an EM round's noise, before saving it); settings a gmm job
with differential privacy cannot take are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from models.families import job_spec
from models.mixture.simulator import simulate_mixture
from models.params import SettingError
from store.db import unpack
from tests.integration.test_dp_job import assert_same_budget, keyed, record_announced
from tests.integration.test_loopback import pca_participants
from tests.integration.test_private_job import SEED, PrivateLoopback, fleet  # noqa: F401 (a fixture)

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")
pytest.importorskip("dp_accounting", reason="differential privacy's budget needs dp-accounting (the dev extra)")

EPSILON, ROUNDS, FRACTION, PARAMS = 8.0, 3, 0.5, {"components": 3}


def gmm_settings(names, private: bool) -> dict:
    return {"features": names, "seed": SEED, "private": private, "rounds": ROUNDS, "fraction": FRACTION,
            "algorithm_params": PARAMS, "dp_epsilon": EPSILON}


def simulated(fleet, private: bool, **kw) -> dict:  # noqa: F811
    from models.private.accounting import Budget

    names, parts, _, _ = fleet
    X = np.vstack(parts)
    return simulate_mixture(parts, X, np.zeros(len(X)), names, "fedem", ROUNDS, FRACTION, seed=SEED, params=PARAMS,
                            private=private, dp=Budget(EPSILON), **kw)


def assert_same_job(loop: PrivateLoopback, sim: dict, private: bool) -> None:
    """The job's mixture, threshold and budget are the simulator's (the devices clip in private mode: the coordinator
    cannot count what they clipped)."""
    mv = loop.model()
    stored, m = unpack(mv.arrays), sim["detector"].mixture_
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-6)
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-6)
    np.testing.assert_allclose(stored["prec_chol"], m.prec_chol, rtol=1e-6, atol=1e-6)
    assert mv.info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    assert_same_budget(mv.info["dp"], sim["dp"], skip=("clipped_uploads",) if private else ())
    assert mv.info["dp"]["noise"] == ("distributed" if private else "central")
    assert mv.info["dp"]["sums"]["sampled"] == ROUNDS and 0 < mv.info["dp"]["epsilon_spent"] <= EPSILON


def test_a_dp_gmm_job_equals_the_simulators_distributed_noise_through_dropouts_and_a_restart(tmp_path, fleet,  # noqa: F811
                                                                                             monkeypatch):
    announced = record_announced(monkeypatch)
    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, gmm_settings(names, True), keyed(pca_participants(tmp_path, names, parts, "gmm")),
                           silent=lambda phase: ("dev-02",) if phase.endswith(":unmask") else (), kind="gmm")
    # a coordinator restarted between the share and upload steps of the first EM round's sum
    assert loop.run(restart_after="train:share") == "finished", loop.error()
    sums = [p.partition(":")[0] for p in loop.phases if p.endswith(":advertise")]
    sim = simulated(fleet, True, dropout=1 / 3)
    seeding = sim["all_device_rounds"]
    assert sums == ["mean", "centred", *["seed"] * seeding, *["train"] * ROUNDS, "anchor", "threshold"]
    assert_same_job(loop, sim, True)
    assert loop.model().info["dp"]["clipped_uploads"] is None
    # the round messages announced the simulator's multiplier and clip norms, and each sum's place in the job
    assert {a["multiplier"] for a in announced} == {sim["dp"]["noise_multiplier"]}
    assert {k: v for a in announced for k, v in a["clips"].items()} == sim["dp"]["clip_norms"]
    assert sorted({a["index"] for a in announced}) == list(range(len(sums)))


def test_a_central_dp_gmm_job_equals_the_simulators_central_noise_through_a_restart_mid_sum(tmp_path, fleet,  # noqa: F811
                                                                                          monkeypatch):
    """Central noise: the devices send their changes in the clear (each clipped by the device), the coordinator
    clips, sums and adds the noise from its generator, saved after each sum; a coordinator killed after drawing the
    second EM round's noise, before saving, closes it again with the same noise. Keyed as the simulator's."""
    import coordinator.noisy_detector as noisy

    monkeypatch.setattr(noisy, "central_key", lambda: [SEED, 4242])
    names, parts, _, _ = fleet
    loop = PrivateLoopback(tmp_path, gmm_settings(names, False), pca_participants(tmp_path, names, parts, "gmm"),
                           kind="gmm")
    assert loop.run(until="train:clear") == "train:clear", loop.error()
    loop.step()  # the first EM round
    before = loop.runner.info["dp"]["rng"]

    def killed(*_):
        raise RuntimeError("killed")

    loop.runner.save = killed
    with pytest.raises(RuntimeError, match="killed"):
        loop.step()
    assert loop.runner.info["dp"]["rng"] != before  # the noise was drawn
    loop.restart()
    while loop.runner.phase not in ("finished", "failed"):
        loop.step()
    assert loop.runner.phase == "finished", loop.error()
    sim = simulated(fleet, False)
    clear = [p.partition(":")[0] for p in loop.phases]
    assert clear.count("train") == ROUNDS + 1 and clear.count("seed") == sim["all_device_rounds"]  # one asked twice
    assert_same_job(loop, sim, False)


def test_dp_gmm_job_settings_it_cannot_take_are_refused_naming_the_setting():
    base = {"features": ["a", "b"], "dp_epsilon": 4.0}
    for private in (True, False):
        spec = job_spec("gmm", {**base, "private": private})  # taken, in either mode
        assert spec.dp_epsilon == 4.0
    for kind, bad, field, says in [
            ("gmm", {"algorithm_params": {"splits": 2}}, "algorithm_params.splits", "makes no swaps"),
            ("gmm", {"categorical": ["proto"]}, "categorical", "numeric features only"),
            ("gmm", {"dp_epsilon": 0.0}, "dp_epsilon", "(0, 100]"),
            ("dict", {}, "dp_epsilon", "PCA and gmm jobs")]:
        with pytest.raises(SettingError) as e:
            job_spec(kind, {**base, **bad})
        assert e.value.field == field and says in str(e.value), (kind, bad, e.value)
