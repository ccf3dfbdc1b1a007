"""An agent's worker goes on after a message breaks its handler in a way nobody planned for (a bug, the runtime:
CPython 3.11 once raised SystemError inside np.load with agents run as threads): that round is a dropout for the
coordinator, and the next message is handled. Before, the exception ended the worker thread for good and the job
waited on the agent forever."""

from __future__ import annotations

import numpy as np

from edge_agent.agent import Agent, AgentConfig
from edge_agent.sources import Batch
from wire.protocol import Envelope, job_topic


def test_a_broken_round_handler_is_counted_and_the_agent_goes_on(tmp_path, caplog):
    training = iter([Batch(["a", "b"], np.random.default_rng(0).normal(size=(50, 2)))])
    agent = Agent(AgentConfig("dev-1", "mqtt://127.0.0.1:1", str(tmp_path / "state")), None, training)
    calls = []

    def broken(env):
        calls.append(env.round)
        if env.round == 1:
            raise SystemError("AST constructor recursion depth mismatch")
        return None

    agent.participants["pca"].on_round = broken
    for rnd in (1, 2):
        env = Envelope("round", "j", rnd, "coordinator", {}, {"phase": "train", "type": "pca", "sampled": ["dev-1"]})
        agent.handle_safely(job_topic("j"), env.encode())
    assert calls == [1, 2]  # the second round reached the participant after the first broke
    assert agent.counters["errors"] == 1
    assert "handling a message on" in caplog.text and "SystemError" in caplog.text
