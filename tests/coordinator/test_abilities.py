"""A differentially private job takes only agents that add their share of the noise (wire.protocol.ABILITIES): an
older agent, which declares no abilities in its status, would send its values without noise into a sum whose
noise was shared out for it, so it is left out of such a job and keeps taking part in the others."""

from __future__ import annotations

from coordinator.service import Coordinator
from models.families import family
from store.db import Job
from wire.protocol import ABILITIES, Envelope, agent_topic


def status(agent: str, **meta) -> bytes:
    return Envelope("status", "", 0, agent, {}, {"online": True, "jobs": ["pca", "gmm"], **meta}).encode()


def test_a_dp_job_leaves_out_agents_that_do_not_add_noise(tmp_path):
    c = Coordinator("mqtt://127.0.0.1:9", f"sqlite:///{tmp_path}/c.db")  # never started: statuses handed to it
    try:
        c.handle(agent_topic("new-1", "status"), status("new-1", abilities=list(ABILITIES)))
        c.handle(agent_topic("old-1", "status"), status("old-1"))  # an agent from before abilities were declared
        c.handle(agent_topic("odd-1", "status"), status("odd-1", abilities="dp"))  # not a list: declares nothing
        assert sorted(c.online_devices("pca")) == ["new-1", "odd-1", "old-1"]
        assert c.online_devices("pca", frozenset({"dp"})) == ["new-1"]

        def needs(params: dict) -> frozenset[str]:
            job = Job(id="j", type="pca", algorithm="fedmm", params={"features": ["a", "b", "c", "d", "e"], **params})
            return family("pca").load_runner()(job, c.sessions, lambda *a: None, "t").needs()

        assert needs({"dp_epsilon": 4.0}) == {"dp"} and needs({}) == frozenset()
    finally:
        c.locks.close()
        c.engine.dispose()
