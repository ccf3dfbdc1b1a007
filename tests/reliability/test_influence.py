"""The operator sees influence (issue 22, point 5): each round records which devices were refused, capped or
kept out of the shared model, and why; the API, `fedsentry job show` and the dashboard show it per job, and a
device that is repeatedly excluded is flagged. Real job runner (the loopback of test_loopback: encoded
envelopes, a real SQLite database), the API over the same database."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from fedsentry.cli import main
from models.mixture.rogues import compliant_rogues
from models.synthetic import generate_traffic
from store.db import Round
from store.jobs import influence
from tests.integration.test_loopback import Loopback, pca_participants
from tests.reliability.test_hostile_uploads import Hostile, drive, forger

ROUNDS = 8


def run_job(tmp_path, participants, features, params=None):
    loop = Loopback(tmp_path, "gmm", "fedem", {"features": features, "rounds": ROUNDS, "fraction": 1.0, "seed": 1,
                                               "min_agents": len(participants), "deadline": 0.05,
                                               "algorithm_params": params or {"components": 8}}, participants)
    drive(loop, participants)
    assert loop.runner.phase == "finished"
    with loop.sessions() as s:
        return s.query(Round).filter_by(job_id="loop").order_by(Round.round).all()


def fleet(devices=8):
    data = generate_traffic(n_devices=devices, records_per_device=250, seed=3)
    parts = np.array_split(data.X_normal, devices)
    return data, parts


def test_a_compliant_rogue_is_kept_out_round_after_round_and_flagged(tmp_path):
    data, parts = fleet()
    parts = compliant_rogues(parts, data.X_attack, 1, rows=120)
    rounds = run_job(tmp_path, pca_participants(tmp_path, data.feature_names, parts, "gmm"), data.feature_names)
    kept = [r.metrics.get("influence", {}).get("kept_out", {}) for r in rounds if r.phase == "train"]
    assert sum("dev-00" in k for k in kept) >= ROUNDS - 1  # every EM round once its components are its own
    assert "support rule" in kept[-1]["dev-00"]
    view = influence(rounds)
    assert view[0]["device"] == "dev-00" and view[0]["flagged"] and view[0]["kept_out"] >= ROUNDS - 1
    assert not any(d["flagged"] for d in view[1:])  # honest devices: at most an occasional round


def test_uploads_no_records_could_give_are_refused_with_their_reason_and_flagged(tmp_path):
    data, parts = fleet(6)
    participants = pca_participants(tmp_path, data.feature_names, parts, "gmm")
    participants[2] = Hostile(participants[2], forger("offdiagonal", 1e4, 0))  # not positive semi-definite
    participants[3] = Hostile(participants[3], forger("random", 1e12, 1))  # refused at the door: its norm
    rounds = run_job(tmp_path, participants, data.feature_names, {"components": 4})
    view = {d["device"]: d for d in influence(rounds)}
    assert view["dev-02"]["flagged"] and view["dev-02"]["refused"] >= ROUNDS - 1
    assert "positive semi-definite" in view["dev-02"]["reasons"]["refused"]
    assert view["dev-03"]["flagged"] and view["dev-03"]["rounds_answered"] <= 2  # only statistics and threshold
    assert "norm" in view["dev-03"]["reasons"]["refused"]
    assert not any(view[d]["refused"] or view[d]["capped"] for d in view if d not in ("dev-02", "dev-03"))

    # the API and the CLI show the same view
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/loop.db", cookie_secure=False))
    with app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
    got = TestClient(app).get("/api/v1/jobs/loop/influence", headers={"Authorization": f"Bearer {key}"})
    assert got.status_code == 200
    assert {d["device"]: d["refused"] for d in got.json() if d["refused"]} == {"dev-02": view["dev-02"]["refused"],
                                                                               "dev-03": view["dev-03"]["refused"]}
    assert TestClient(app).get("/api/v1/jobs/nope/influence",
                               headers={"Authorization": f"Bearer {key}"}).status_code == 404


def test_job_show_lists_the_flagged_devices(tmp_path, capsys):
    data, parts = fleet(6)
    participants = pca_participants(tmp_path, data.feature_names, parts, "gmm")
    participants[1] = Hostile(participants[1], forger("offdiagonal", 1e4, 0))
    run_job(tmp_path, participants, data.feature_names, {"components": 4})
    assert main(["job", "show", "loop", "--db", f"sqlite:///{tmp_path}/loop.db"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("dev-01"))
    assert "yes" in line and "positive semi-definite" in line and "FLAGGED" in out
