"""Zeek's unset values and text fields through a whole job: devices agree a vocabulary in the statistics
phase, unset numbers become missing (not 0) with indicator columns, and a device scoring with the promoted
model does not flag normal connections for having unset fields."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.detector_participant import TrainingBuffer
from edge_agent.scorer import Scorer
from edge_agent.sources import Batch
from edge_agent.store import AgentStore
from models.detection.encoding import ZEEK_CONN
from models.families import family
from store.db import unpack
from tests.integration.test_loopback import Loopback
from wire.model import stored_envelope

NUMERIC = ZEEK_CONN.numeric


def connections(n: int, rng: np.random.Generator, attack: bool = False) -> Batch:
    """Zeek-like conn records: DNS over UDP, HTTP over TCP, and unanswered TCP attempts (state S0) whose
    duration and byte counts Zeek leaves unset ("-")."""
    kind = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    X = np.full((n, len(NUMERIC)), np.nan)
    proto = np.where(kind == 0, "udp", "tcp").astype(object)
    service = np.array(["dns", "http", None], dtype=object)[kind]
    state = np.array(["SF", "SF", "S0"], dtype=object)[kind]
    history = np.array(["Dd", "ShADadfF", "S"], dtype=object)[kind]
    answered = kind < 2
    size = np.where(kind == 0, 60.0, 900.0)[answered]
    X[answered, 0] = rng.lognormal(-3, 0.5, answered.sum())  # duration
    X[answered, 1] = size * rng.lognormal(0, 0.3, answered.sum())  # src_bytes
    X[answered, 2] = 3 * size * rng.lognormal(0, 0.3, answered.sum())  # dst_bytes
    X[:, 3] = 0.0  # missed_bytes
    X[:, 4] = np.where(answered, np.where(kind == 0, 1, 6), 1) * rng.integers(1, 3, n)  # src_pkts
    X[:, 5] = X[:, 4] * 40 + np.nan_to_num(X[:, 1])  # src_ip_bytes
    X[:, 6] = np.where(answered, X[:, 4], 0)  # dst_pkts
    X[:, 7] = X[:, 6] * 40 + np.nan_to_num(X[:, 2])  # dst_ip_bytes
    if attack:  # a scan answered by resets: a state and history normal traffic never shows
        state[:] = "REJ"
        history[:] = "Sr"
        service[:] = None
        proto[:] = "tcp"
        X[:, [0, 1, 2]] = np.nan
        X[:, 4], X[:, 6] = 1, 1
        X[:, 5], X[:, 7] = 40, 40
    return Batch(list(NUMERIC), X, text={"proto": proto, "service": service, "conn_state": state,
                                         "history": history})


@pytest.mark.parametrize("job_type", ["gmm", "pca"])
def test_unset_fields_are_missing_not_zero_and_text_fields_are_one_hot(tmp_path, job_type):
    rng = np.random.default_rng(0)
    participants = []
    for i in range(4):
        store = AgentStore(tmp_path / f"z-{i}")
        buffer = TrainingBuffer(store)
        buffer.add(connections(1500, rng))
        participants.append(family(job_type).load_participant()(f"z-{i}", store, buffer))
    settings = {"features": NUMERIC, "categorical": ZEEK_CONN.categorical, "flags": ZEEK_CONN.flags, "rounds": 10,
                "fraction": 0.5, "seed": 0, "algorithm_params": {"components": 6} if job_type == "gmm" else {}}
    mv = Loopback(tmp_path, job_type, "fedem" if job_type == "gmm" else "fedmm", settings, participants).run()
    features = mv.info["features"]
    # the vocabulary the devices agreed: indicators for the fields Zeek leaves unset, one-hot text fields
    assert {"duration_missing", "src_bytes_missing", "dst_bytes_missing"} <= set(features)
    assert {"proto=udp", "proto=tcp", "service=dns", "service=http", "conn_state=S0", "history:S",
            "history:d"} <= set(features)
    assert "missed_bytes_missing" not in features  # never unset: no indicator

    scorer = Scorer("z-0")
    scorer.load(stored_envelope(mv.job_id, mv.version, unpack(mv.arrays), dict(mv.info)))
    normal = connections(20_000, np.random.default_rng(1))
    flagged = np.asarray(scorer.detector.score_samples(scorer.matrix(normal))) > scorer.detector.threshold_
    unset = np.isnan(normal.X[:, 0])
    # records with unset fields are flagged about as often as complete ones (before: 6.0 % against 0.9 %)
    assert flagged[unset].mean() < 0.03 and flagged[~unset].mean() < 0.03, (flagged[unset].mean(),
                                                                         flagged[~unset].mean())
    scan = connections(500, np.random.default_rng(2), attack=True)
    caught = np.asarray(scorer.detector.score_samples(scorer.matrix(scan))) > scorer.detector.threshold_
    assert caught.mean() > 0.9
