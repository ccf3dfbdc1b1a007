"""Thousands of generated malformed inputs: envelopes at the coordinator, bodies and queries at the API.
No crash, every one rejected with a reason, the model unchanged."""

from __future__ import annotations

import json
import random

import numpy as np
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from coordinator.broker import free_port
from coordinator.service import Coordinator
from models.families import FAMILIES
from store.db import Job, ModelVersion
from wire.protocol import Envelope, agent_topic, encode

D, K = 11, 3


def mutate(payload: bytes, rng: random.Random) -> bytes:
    """One random corruption of a valid envelope."""
    b = bytearray(payload)
    how = rng.randrange(6)
    if how == 0:  # flip bytes
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif how == 1:  # truncate
        b = b[: rng.randrange(len(b))]
    elif how == 2:  # extend
        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif how == 3:  # random bytes
        b = bytearray(rng.randbytes(rng.randint(0, 300)))
    elif how == 4:  # splice a header field
        b = bytearray(payload.replace(b'"round":', b'"round":' + str(rng.choice([-1, 2**40, "x"])).encode() + b',"r":'))
    else:  # a well-formed envelope with bad content
        arrays = rng.choice([{"U": np.full((D, K), np.nan)}, {"U": np.zeros((K, D))}, {"U": np.full((D, K), 1e12)},
                             {"S": np.zeros((D, K))}, {}, {"U": np.zeros((D, K), dtype=np.int8)}])
        kind = rng.choice(["upload", "alert", "stats", "histogram", "round", "model"])
        b = bytearray(encode(Envelope(kind, rng.choice(["job", "nojob", ""]), rng.randrange(5), "dev-1", arrays,
                                      rng.choice([{}, {"id": 5}, {"score": "x"}]))))
    return bytes(b)


def test_ten_thousand_malformed_envelopes(tmp_path):
    # a coordinator with a running job; messages are handed to it exactly as its network thread would
    c = Coordinator(f"mqtt://127.0.0.1:{free_port()}", f"sqlite:///{tmp_path}/f.db")
    features = [f"f{j}" for j in range(D)]
    c.create_job("job", "pca", "fedpg", {"features": features, "rank": K, "rounds": 5, "fraction": 1.0})
    from coordinator.pca_job import PCAJob

    with c.sessions() as s:
        runner = PCAJob(s.get(Job, "job"), c.sessions, lambda *a: None, "t")
    runner.participants = runner.sampled = ["dev-1", "dev-2"]
    runner.info = {"features": features, "mean": [0.0] * D, "scale": [1.0] * D, "counts": [10.0, 10.0]}
    runner.rng = np.random.default_rng(0)
    runner.server, runner.broadcast = runner.algorithm().init_server(2, runner.rng)
    runner.phase, runner.round = "train", 1
    c.jobs["job"] = runner
    before = {k: v.copy() for k, v in runner.broadcast.items()}
    valid = encode(Envelope("upload", "job", 1, "dev-1", {"U": np.eye(D)[:, :K]}))
    rng = random.Random(1234)
    n = 10_000
    for i in range(n):
        topic = agent_topic(rng.choice(["dev-1", "dev-2", "dev-9"]), rng.choice(["upload", "alerts", "status"]))
        if i % 500 == 0:
            topic = rng.choice(["fedsentry/v1/agents/../upload", "x", "fedsentry/v1/agents/dev-1"])
        c.handle(topic, mutate(valid, rng))
    assert sum(c.rejected.values()) + c.accepted == n
    assert c.accepted <= 2  # at most the two clients' first well-formed uploads could pass
    assert {"malformed", "size", "sender", "shape", "non_finite"} <= set(c.rejected)
    for k, v in before.items():  # nothing touched the model: aggregation happens only when the round closes
        assert np.array_equal(runner.broadcast[k], v)
    c.engine.dispose()


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=5), max_leaves=20)


def test_thousands_of_malformed_api_bodies_and_queries(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/a.db", cookie_secure=False))
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    client = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    statuses: list[int] = []
    routes = ["/api/v1/jobs", "/api/v1/recommendations", "/api/v1/jobs/x/cancel", "/api/v1/anomalies/x/ack",
              "/api/v1/models/1/promote"]
    job_keys = ["type", "id", "features", "items", "algorithm", "rank", "rounds", "fraction", "seed", "quantile",
                "min_agents", "deadline", "rating_min", "rating_max"]
    bodies = st.one_of(json_values, st.fixed_dictionaries({}, optional={k: json_values for k in job_keys}))

    @given(route=st.sampled_from(routes), body=bodies)
    @settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def post(route, body):
        r = client.post(route, content=json.dumps(body), headers={"content-type": "application/json"})
        statuses.append(r.status_code)
        assert r.status_code < 500, (route, body, r.text)
        if r.status_code in (400, 422):
            detail = r.json()["detail"]
            assert detail and all("field" in d and "problem" in d for d in detail), detail

    @given(params=st.dictionaries(st.sampled_from(["device", "job", "since", "until", "min_score", "acknowledged",
                                                   "limit", "cursor", "online", "status"]),
                                  st.text(max_size=30), max_size=4),
           path=st.sampled_from(["/api/v1/anomalies", "/api/v1/devices", "/api/v1/jobs"]))
    @settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def get(params, path):
        r = client.get(path, params=params)
        statuses.append(r.status_code)
        assert r.status_code < 500, (path, params, r.text)

    post()
    get()
    assert len(statuses) >= 2000
    with app.state.sessions() as s:  # whatever got through is a valid job; no model was touched
        assert s.query(ModelVersion).count() == 0
        assert all(j.type in FAMILIES for j in s.query(Job))  # whatever was accepted is a job of a known family
