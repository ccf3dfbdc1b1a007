"""Private recommendation jobs (issue 23, point 2) through the coordinator's job runner and the agents'
participants, without a broker (tests.integration.test_private_job's loopback: every message a real encoded
envelope, each device's routed shares on its own topic): the item factors and test RMSE equal the simulator's private
mode with the same seed, with devices that drop after their masked upload and a coordinator restarted between two
steps of a sum; what private mode does not run over MQTT is refused naming `private`."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.store import AgentStore
from models.families import family, job_spec
from models.jobspec import SettingError
from models.recsys.data import split_users, train_test_split
from models.recsys.simulator import simulate_recsys
from models.recsys.synthetic import generate_ratings
from store.db import Round, unpack
from tests.integration.test_loopback import _shard
from tests.integration.test_private_job import PrivateLoopback

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")

N, RANK, ROUNDS, FRACTION, SEED = 6, 3, 4, 0.5, 1


@pytest.fixture(scope="module")
def ratings():
    data = generate_ratings(n_users=90, n_items=40, seed=4)
    train, test = train_test_split(data, 0.2, seed=0)
    parts = split_users(train.n_users, N, "random", np.random.default_rng(0))
    return train, test, parts


def participants(tmp_path, ratings) -> list:
    train, test, parts = ratings
    return [family("recsys").load_participant()(f"rs-{i}", AgentStore(tmp_path / f"rs-{i}"), _shard(train, users),
                                                 _shard(test, users)) for i, users in enumerate(parts)]


def settings(ratings) -> dict:
    return {"items": ratings[0].item_ids.tolist(), "rank": RANK, "rounds": ROUNDS, "fraction": FRACTION,
            "seed": SEED, "private": True}


@pytest.mark.parametrize("algorithm", ["fedmavg", "fedmc-admm", "altgdmin"])
def test_a_private_recsys_job_equals_the_simulators_private_mode_through_dropouts_and_a_restart(tmp_path, ratings,
                                                                                              algorithm):
    train, test, parts = ratings
    # the first device of each sum vanishes after its masked upload: its upload still counts
    loop = PrivateLoopback(tmp_path, settings(ratings), participants(tmp_path, ratings), kind="recsys",
                           algorithm=algorithm, silent=lambda phase: loop.runner.sampled[:1] if phase.endswith(
                               ":unmask") else ())
    # a coordinator restarted between the share and upload steps of a training sum
    assert loop.run(restart_after="train:share") == "finished", loop.error()
    first = "setup" if algorithm == "altgdmin" else "train"
    assert loop.phases[:5] == ["stats", f"{first}:advertise", f"{first}:share", f"{first}:upload", f"{first}:unmask"]
    assert loop.phases.count("setup:unmask") == (10 if algorithm == "altgdmin" else 0)
    assert loop.phases.count("train:unmask") == ROUNDS and loop.phases[-1] == "eval"
    sim = simulate_recsys(train, test, parts, algorithm, RANK, ROUNDS, FRACTION, seed=SEED, private=True)
    mv = loop.model()
    assert sim["secure_sum"]["sums"] == ROUNDS + loop.phases.count("setup:unmask")
    with loop.sessions() as s:  # each sum decoded with one device fewer answering its unmask step than uploaded
        unmasked = [(r.metrics["survivors"], len(r.answered))
                    for r in s.query(Round).filter_by(job_id="loop", phase="train:unmask").order_by(Round.round)]
        asked = [len(r.sampled)
                 for r in s.query(Round).filter_by(job_id="loop", phase="train:advertise").order_by(Round.round)]
    assert unmasked == [(n, n - 1) for n in asked] and min(asked) >= 3
    V = unpack(mv.arrays)["item_factors"]
    # the same sums of the same encoded values: equal to the last bit here (the brief asks 1e-6; entries reach 0.5)
    np.testing.assert_allclose(V, simulated_items(ratings, algorithm), rtol=0, atol=1e-9)
    assert mv.info["test_rmse"] == pytest.approx(sim["test_rmse"], abs=1e-9)


def simulated_items(ratings, algorithm: str, rank: int = RANK, rounds: int = ROUNDS, fraction: float = FRACTION,
                    seed: int = SEED) -> np.ndarray:
    """The simulator's private-mode item factors (simulate_recsys reports figures, not the factors)."""
    from models.recsys import make_algorithm
    from models.recsys.evaluation import prepare_clients
    from models.recsys.private import SummedRecsys
    from models.recsys.simulator import run_federated

    train, test, parts = ratings
    alg = make_algorithm(algorithm, train.n_items, rank)
    run = run_federated(alg, prepare_clients(train, parts), test, rounds, fraction, seed,
                        receive=SummedRecsys(alg, max(len(p) for p in parts), 0.0, seed))
    return run.item_factors


def test_a_private_recsys_job_of_an_algorithm_without_summable_uploads_is_refused_naming_private(ratings,
                                                                                                  monkeypatch):
    from models.recsys.fedmavg import FedMAvg

    job_spec("recsys", {**settings(ratings), "algorithm": "fedmavg"})  # summable: accepted
    monkeypatch.setattr(FedMAvg, "summed", {})
    with pytest.raises(SettingError) as e:
        job_spec("recsys", {**settings(ratings), "algorithm": "fedmavg"})
    assert e.value.field == "private" and "fedmavg has no summable uploads" in str(e.value)


def test_a_sum_that_fails_starts_again_and_no_device_keeps_the_state_it_made_for_it(tmp_path, ratings):
    """All but one device of the second training sum miss its upload step: the sum cannot be decoded and starts again
    with fresh keys; each device's client step for the failed attempt is dropped (its upload counted nowhere), so
    the model is still the simulator's."""
    uploads: list[str] = []

    def silent(phase):
        if phase == "train:upload":
            uploads.append(phase)
            if len(uploads) == 2:
                return loop.runner.sampled[1:]
        return ()

    loop = PrivateLoopback(tmp_path, settings(ratings), participants(tmp_path, ratings), kind="recsys",
                           algorithm="fedmavg", silent=silent)
    assert loop.run() == "finished", loop.error()
    assert loop.phases.count("train:advertise") == ROUNDS + 1 and loop.phases.count("train:unmask") == ROUNDS
    np.testing.assert_allclose(unpack(loop.model().arrays)["item_factors"], simulated_items(ratings, "fedmavg"),
                               rtol=0, atol=1e-9)
