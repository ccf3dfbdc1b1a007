"""Recommendation jobs over a real broker: agents hold their users' ratings; the deployment computes
exactly what `simulate recsys` computes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from edge_agent.agent import Agent, AgentConfig
from models.recsys.data import split_users, train_test_split
from models.recsys.simulator import simulate_recsys
from models.recsys.synthetic import generate_ratings
from store.db import ModelVersion, Round, unpack
from tests.integration.conftest import wait_until

N = 4


def shard(r, users):
    """A client's ratings as its device would load them: only its users, original ids."""
    from models.recsys.data import from_triples

    mine = np.isin(r.user, users)
    return from_triples(r.user_ids[r.user[mine]], r.item_ids[r.item[mine]], r.rating[mine], r.rating_min,
                        r.rating_max)


@contextmanager
def rating_agents(broker, coordinator, tmp_path, train, test, parts) -> Iterator[list[Agent]]:
    """One in-process agent per part of the users (ids rs-0, rs-1, ...), online; stopped on leaving."""
    threads, agents = [], []
    for i, users in enumerate(parts):
        a = Agent(AgentConfig(f"rs-{i}", broker.url, str(tmp_path / f"rs-{i}")),
                  ratings=(shard(train, users), shard(test, users)))
        t = threading.Thread(target=a.run, daemon=True)
        t.start()
        agents.append(a)
        threads.append(t)
    try:
        wait_until(lambda: len(coordinator.online_devices("recsys")) == len(parts), what="agents online")
        yield agents
    finally:
        for a in agents:
            a.stop.set()
        for t in threads:
            t.join(timeout=10)


@pytest.mark.parametrize("algorithm", ["fedmc-admm", "altgdmin"])
def test_recsys_job_equals_the_simulator(broker, coordinator, tmp_path, algorithm):
    data = generate_ratings(n_users=120, n_items=80, seed=2)
    train, test = train_test_split(data, 0.2, seed=0)
    parts = split_users(train.n_users, N, "random", np.random.default_rng(0))
    with rating_agents(broker, coordinator, tmp_path, train, test, parts):
        coordinator.create_job("rs", "recsys", algorithm, {
            "items": train.item_ids.tolist(), "rank": 4, "rounds": 6, "fraction": 0.5, "seed": 0, "min_agents": N,
            "deadline": 10.0})
        wait_until(lambda: coordinator.job_status("rs") in ("finished", "failed"), 60, "job")
        assert coordinator.job_status("rs") == "finished"
        with coordinator.sessions() as s:
            mv = s.query(ModelVersion).filter_by(job_id="rs").one()
            phases = [r.phase for r in s.query(Round).filter_by(job_id="rs").order_by(Round.round)]
            V = unpack(mv.arrays)["item_factors"]
        sim = simulate_recsys(train, test, parts, algorithm, 4, 6, 0.5, seed=0)
        assert abs(mv.info["test_rmse"] - sim["test_rmse"]) < 1e-9
        setup = 10 if algorithm == "altgdmin" else 0
        assert phases == ["stats"] + ["setup"] * setup + ["train"] * 6 + ["eval"]
        assert V.shape == (train.n_items, 5) and mv.promoted
