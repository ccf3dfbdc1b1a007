"""Rounds above the switch (models.core.sampling) are stored as their draw and counts, not as lists of device ids:
the job's rounds, its influence view and the upload counter still say what happened, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from api.security import create_key
from models.core.sampling import EVERYONE, fleet_names, sample
from models.families import job_spec
from store.jobs import create_job
from store.round_record import round_row
from tests.api.conftest import bearer

FLEET = 5000


def test_drawn_rounds_are_stored_compact_and_reported_truthfully(any_app):
    import numpy as np

    names = fleet_names(FLEET)
    rng = np.random.default_rng(7)
    create_job(any_app.state.sessions, "big", job_spec("gmm", {"features": ["a", "b"], "fraction": 0.01}))
    truth = dict.fromkeys(names, 0)
    with any_app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
        s.add(round_row("big", 0, "stats", names, names, EVERYONE, {"answered": FLEET}, 0.1))
        for n in names:
            truth[n] += 1
        for r in range(1, 5):
            idx, draw = sample(rng, names, 0.01)
            asked = [names[i] for i in idx]
            answered = asked[2:]  # the first two drop out
            for n in answered:
                truth[n] += 1
            watched = asked[:1] + asked[-1:]  # one that dropped out, one that answered: both capped
            s.add(round_row("big", r, "train", asked, answered, draw, {
                "answered": len(answered), "influence": {"capped": dict.fromkeys(watched, "weight capped")}}, 0.1))
    client, h = TestClient(any_app), bearer(key)
    job = client.get("/api/v1/jobs/big", headers=h).json()
    assert [(r["sampled"], r["answered"]) for r in job["rounds"]] == [(FLEET, FLEET)] + [(50, 48)] * 4
    influence = client.get("/api/v1/jobs/big/influence", headers=h).json()
    assert influence and all(d["rounds_answered"] == truth[d["device"]] for d in influence)
    assert {d["rounds_answered"] for d in influence} == {1, 2}  # those that dropped out answered the stats only
    text = client.get("/metrics", headers=h).text
    assert f'fedsentry_uploads_total{{outcome="accepted",reason=""}} {FLEET + 4 * 48}.0' in text
    from store.db import Round

    with any_app.state.sessions() as s:
        stored = s.query(Round).filter_by(job_id="big").all()
    assert max(len(json.dumps(r.sampled)) + len(json.dumps(r.answered)) for r in stored) < 200
