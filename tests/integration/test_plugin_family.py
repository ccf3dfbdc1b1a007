"""A job family is one package per side plus one registry line (issue 25, point 2): a fourth family written as
a plug-in (tests/plugin_family: its spec and algorithm, its coordinator runner, its agent participant) gets the
REST body, the OpenAPI schema, the `job create` flags and validation from its spec, and runs on the real
coordinator and agents over a real broker, without a line of the product naming it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from coordinator.service import Coordinator
from fedsentry.cli import build_parser, main
from models.families import register, unregister
from store.db import Job, Round
from tests.integration.conftest import wait_until
from tests.plugin_family import FAMILY

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugin():
    register(FAMILY)  # the registry line
    yield FAMILY
    unregister(FAMILY.name)


def test_no_file_of_the_product_names_the_plugin():
    """The name appears in its own packages and in the tests that register it, nowhere else."""
    found = subprocess.run(["git", "grep", "-l", "--untracked", FAMILY.name], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()
    assert found and all(f.startswith(("tests/plugin_family/", "tests/integration/test_plugin_family.py"))
                         for f in found), found


def test_the_plugin_gets_its_body_flags_and_validation_from_its_spec(plugin, tmp_path, capsys):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db", cookie_secure=False))
    with app.state.sessions.begin() as s:
        admin = {"Authorization": f"Bearer {create_key(s, 'admin')}"}
    client = TestClient(app)
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    body = schema["FleetmeanJobBody"]["properties"]
    assert body["rounds"]["description"] == "averaging rounds (default 3)"
    assert "numeric features to average" in body["features"]["description"]
    bad = client.post("/api/v1/jobs", json={"type": "fleetmean", "features": []}, headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"] == [{"field": "body.features",
                                                                "problem": "1 to 100 feature names"}]
    bad = client.post("/api/v1/jobs", json={"type": "fleetmean"}, headers=admin)
    assert bad.json()["detail"] == [{"field": "body.features", "problem": "a fleetmean job needs the features to "
                                                                          "average"}]
    bad = client.post("/api/v1/jobs", json={"type": "fleetmean", "features": ["a"], "holdout": 0.2}, headers=admin)
    assert bad.json()["detail"] == [{"field": "body.holdout", "problem": "not a setting of a fleetmean job"}]
    ok = client.post("/api/v1/jobs", json={"type": "fleetmean", "features": ["a", "b"], "rounds": 2}, headers=admin)
    assert ok.status_code == 201, ok.text
    assert ok.json()["type"] == "fleetmean" and ok.json()["algorithm"] == "fedmean"

    create = next(a for a in build_parser()._subparsers._group_actions[0].choices["job"]._subparsers
                  ._group_actions[0].choices["create"]._actions if "--rounds" in a.option_strings)
    assert "3 for fleetmean" in create.help and "default 30 for gmm, pca, dict, otmap, recsys" in create.help
    db = f"sqlite:///{tmp_path}/cli.db"
    assert main(["job", "create", "--db", db, "--id", "m1", "--type", "fleetmean", "--features", "a,b",
                 "--param", "shrink=0.5"]) == 0
    assert main(["job", "create", "--db", db, "--type", "fleetmean", "--features", "a", "--param",
                 "shrinkage=1"]) == 2
    assert "--param shrinkage: not a parameter of fedmean (it takes shrink)" in capsys.readouterr().err


def test_the_plugin_runs_on_real_agents_and_coordinator(plugin, broker, fleet, tmp_path):
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=k, size=(20 + 10 * k, 3)) for k in range(3)]
    for k, X in enumerate(parts):
        fleet.add(f"dev-{k}", X, ["a", "b", "c"])
    db = f"sqlite:///{tmp_path}/coordinator.db"
    assert main(["job", "create", "--db", db, "--id", "mean-1", "--type", "fleetmean", "--features", "c,a",
                 "--fraction", "1", "--min-agents", "3"]) == 0
    c = Coordinator(broker.url, db).start()
    try:
        def status() -> str:
            with c.sessions() as s:
                return s.get(Job, "mean-1").status
        wait_until(lambda: status() in ("finished", "failed"), 60, "the plug-in job to finish")
        with c.sessions() as s:
            job = s.get(Job, "mean-1")
            assert job.status == "finished", job.error
            rounds = list(s.scalars(select(Round).where(Round.job_id == "mean-1").order_by(Round.round)))
        assert [(r.phase, len(r.answered)) for r in rounds] == [("stats", 3), ("train", 3), ("train", 3),
                                                                 ("train", 3)]
        pooled = np.concatenate(parts)[:, [2, 0]].mean(axis=0)  # the features as the job names them: c, a
        assert np.allclose(rounds[-1].metrics["mean"], pooled)
    finally:
        c.close()


def test_the_plugin_simulates_through_its_registry_line(plugin):
    """`fedsentry simulate`'s runner (fedsentry.runs.detection.simulate) takes a family's simulation from its
    registry entry: the plug-in's runs the one round loop in-process and averages the fleet."""
    from argparse import Namespace

    from fedsentry.runs.detection import simulate

    rng = np.random.default_rng(1)
    parts = [rng.normal(loc=k, size=(10, 2)) for k in range(4)]
    args = Namespace(detector=FAMILY.name, fraction=1.0, rounds=2, seed=0)
    out = simulate(args, "fedmean", None, None, parts)
    assert out["algorithm"] == "fedmean"
    assert np.allclose(out["mean"], np.vstack(parts).mean(axis=0))
    half = simulate(args, "fedmean", None, None, parts, params={"shrink": 0.5}, rounds=1)
    assert np.allclose(half["mean"], 0.5 * np.vstack(parts).mean(axis=0))
