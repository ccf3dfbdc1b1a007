"""What an agent keeps for false-positive feedback is bounded: the features of its KEEP_RECORDS most recently flagged
records (not their flow identifiers), and a report of every action in force fits its status message."""

from __future__ import annotations

import json

import numpy as np

from edge_agent.feedback import KEEP_RECORDS, Kept
from edge_agent.sources import Batch
from edge_agent.store import AgentStore
from wire.feedback import MAX_ACTIONS, read_report
from wire.protocol import MAX_HEADER, Envelope, decode


def test_the_kept_records_are_the_newest_few_and_survive_a_restart(tmp_path):
    store = AgentStore(tmp_path)
    kept = Kept(store)
    for b in range(5):
        X = np.random.default_rng(b).random((400, 3))
        text = {"uid": np.array([f"C{b}-{i}" for i in range(400)], dtype=object),
                "proto": np.array(["tcp"] * 400, dtype=object)}
        kept.add("m:1", 1000 * b + np.arange(400.0) + 1, Batch(["a", "b", "c"], X, None, text))
    assert len(kept.rows) == KEEP_RECORDS
    newest = kept.get("m:1", 4400.0)
    assert newest is not None and newest.X.shape == (1, 3) and set(newest.text) == {"proto"}
    assert kept.get("m:1", 1.0) is None  # the oldest forgotten
    kept.save()
    again = Kept(store).get("m:1", 4400.0)
    assert again is not None and np.array_equal(again.X, newest.X) and again.text["proto"][0] == "tcp"


def test_a_report_of_every_action_fits_a_status_message():
    effect = {"before": 1.234567890123456e-3, "after": 9.87654321098765e2, "cap": 1.5e3, "capped": True,
              "records": 512, "stale": 512, "trained": 512}
    report = {"model": "j" * 64 + ":2147483647", "base": 1.0, "threshold": 2.0, "cap": 3.0, "training": True,
              "actions": {f"{i:032x}": effect for i in range(MAX_ACTIONS)}}
    status = Envelope("status", "", 0, "dev-1", {}, {"online": True, "feedback": report, "features": ["f" * 64] * 200})
    payload = status.encode()
    assert len(json.dumps(status.meta)) < MAX_HEADER
    assert read_report(decode(payload).meta["feedback"])["actions"]["0" * 32]["capped"]
