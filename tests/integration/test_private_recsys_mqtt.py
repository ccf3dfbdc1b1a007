"""A private recommendation job (issue 23, point 2) over a real broker with in-process agents: each training round's
upload a secure sum whose steps are job rounds, each device's routed shares on its own topic, a device that misses
the unmasking of the first sum it is in (its upload counts); the item factors and test RMSE equal the simulator's
private mode with the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.recsys_participant import RecsysParticipant
from models.recsys.data import split_users, train_test_split
from models.recsys.messages import RecsysRound
from models.recsys.simulator import simulate_recsys
from models.recsys.synthetic import generate_ratings
from tests.integration.conftest import coordinator_result
from tests.integration.test_private_recsys import simulated_items
from tests.integration.test_recsys_job import rating_agents
from wire.messages import read

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")

N, RANK, ROUNDS, FRACTION, SEED = 5, 3, 3, 0.6, 2
QUIET = "rs-1"  # misses the unmask step of the first sum it uploaded to


@pytest.mark.parametrize("algorithm", ["fedmavg", "altgdmin"])
def test_a_private_recsys_job_over_mqtt_equals_the_simulators_private_mode(broker, coordinator, tmp_path,
                                                                           monkeypatch, algorithm):
    missed: list[int] = []
    on_round = RecsysParticipant.on_round

    def quiet(self, env):
        msg = read(RecsysRound, env)
        if self.id == QUIET and msg.phase == "train:unmask" and not missed and msg.asks(self.id):
            missed.append(env.round)
            return None
        return on_round(self, env)

    monkeypatch.setattr(RecsysParticipant, "on_round", quiet)
    data = generate_ratings(n_users=100, n_items=50, seed=3)
    train, test = train_test_split(data, 0.2, seed=0)
    parts = split_users(train.n_users, N, "random", np.random.default_rng(0))
    with rating_agents(broker, coordinator, tmp_path, train, test, parts):
        coordinator.create_job("prs", "recsys", algorithm, {
            "items": train.item_ids.tolist(), "rank": RANK, "rounds": ROUNDS, "fraction": FRACTION, "seed": SEED,
            "private": True, "min_agents": N, "deadline": 3.0})
        done = coordinator_result(coordinator, "prs", 90)
        V = done.arrays["item_factors"]
        phases = [r.phase for r in done.rounds]
        steps = ["advertise", "share", "upload", "unmask"]
        setup = 10 if algorithm == "altgdmin" else 0  # its power iterations: a secure sum of every device each
        assert phases == ["stats"] + [f"setup:{s}" for s in steps] * setup + [f"train:{s}" for s in steps] * ROUNDS + [
            "eval"]
        assert len(missed) == 1  # the quiet device's upload counted without its unmasking
        late = next(r for r in done.rounds if r.round == missed[0])
        assert QUIET not in late.answered and late.metrics["survivors"] == len(late.sampled)
        sim = simulate_recsys(train, test, parts, algorithm, RANK, ROUNDS, FRACTION, seed=SEED, private=True)
        np.testing.assert_allclose(V, simulated_items((train, test, parts), algorithm, RANK, ROUNDS, FRACTION, SEED),
                                   rtol=0, atol=1e-9)
        assert done.info["test_rmse"] == pytest.approx(sim["test_rmse"], abs=1e-9) and done.promoted
