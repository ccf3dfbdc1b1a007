"""The REST API through the real app and a real database."""

from __future__ import annotations

import numpy as np
import pytest

from store.db import Job, Round
from tests.api.conftest import bearer, populate

ROUTES = [("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs/job-1"),
          ("POST", "/api/v1/jobs/job-1/cancel"), ("GET", "/api/v1/anomalies"), ("GET", "/api/v1/anomalies/x"),
          ("POST", "/api/v1/anomalies/x/ack"), ("GET", "/api/v1/devices"), ("GET", "/api/v1/jobs/job-1/models"),
          ("GET", "/api/v1/models/1"), ("POST", "/api/v1/models/1/promote"), ("GET", "/metrics"),
          ("GET", "/charts/alerts-per-device.svg")]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_needs_a_key(client, method, path):
    r = client.request(method, path)
    assert r.status_code == 401 and "API key" in r.json()["detail"]
    r = client.request(method, path, headers=bearer("fsk_nope_nope"))
    assert r.status_code == 401 and r.json()["detail"] == "unknown or revoked API key"


def test_open_routes(client):
    assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}
    assert client.get("/openapi.json").status_code == 200 and client.get("/docs").status_code == 200
    assert client.get("/login").status_code == 200
    assert "forged" not in client.get("/login", params={"error": "forged: call 555"}).text  # no text from the URL
    assert client.get("/", follow_redirects=False).headers["location"] == "/login"


ADMIN_ONLY = [("POST", "/api/v1/jobs/job-1/cancel"), ("POST", "/api/v1/anomalies/x/ack"),
              ("POST", "/api/v1/models/1/promote")]


@pytest.mark.parametrize(("method", "path"), ADMIN_ONLY)
def test_viewers_read_but_do_not_change(app, client, keys, method, path):
    populate(app, n_alerts=1)
    r = client.request(method, path, headers=bearer(keys["viewer"]))
    assert r.status_code == 403 and "admin role" in r.json()["detail"]
    r = client.post("/api/v1/jobs", json={"features": ["a", "b", "c"]}, headers=bearer(keys["viewer"]))
    assert r.status_code == 403
    assert client.get("/api/v1/jobs", headers=bearer(keys["viewer"])).status_code == 200


def test_create_get_list_and_cancel_a_job(client, keys):
    admin = bearer(keys["admin"])
    r = client.post("/api/v1/jobs", json={"id": "j-a", "type": "pca", "features": ["a", "b", "c", "d"], "rank": 2,
                                          "rounds": 5, "algorithm": "fedpg"}, headers=admin)
    assert r.status_code == 201 and r.json()["status"] == "pending" and r.json()["params"]["rank"] == 2
    assert client.post("/api/v1/jobs", json={"id": "j-a", "type": "pca", "features": ["a", "b"], "rank": 1},
                       headers=admin).status_code == 409
    got = client.get("/api/v1/jobs/j-a", headers=admin).json()
    assert got["algorithm"] == "fedpg" and got["rounds"] == []
    assert client.get("/api/v1/jobs/nope", headers=admin).status_code == 404
    assert client.post("/api/v1/jobs/j-a/cancel", headers=admin).json()["status"] == "cancelled"
    assert client.post("/api/v1/jobs/j-a/cancel", headers=admin).status_code == 409


def test_a_mixture_job_for_zeek_fields(client, keys):
    body = {"id": "g-a", "type": "gmm", "features": ["duration", "src_bytes"], "categorical": ["proto", "service"],
            "flags": ["history"], "holdout": 0.25, "algorithm_params": {"components": 16}}
    r = client.post("/api/v1/jobs", json=body, headers=bearer(keys["admin"]))
    assert r.status_code == 201, r.text
    got = client.get("/api/v1/jobs/g-a", headers=bearer(keys["admin"])).json()
    assert got["type"] == "gmm" and got["algorithm"] == "fedem"
    assert got["params"]["categorical"] == ["proto", "service"] and got["params"]["holdout"] == 0.25


def test_a_dictionary_job(client, keys):
    body = {"id": "d-a", "type": "dict", "features": ["a", "b", "c"], "algorithm_params": {"atoms": 8, "bits": 8}}
    r = client.post("/api/v1/jobs", json=body, headers=bearer(keys["admin"]))
    assert r.status_code == 201, r.text
    got = client.get("/api/v1/jobs/d-a", headers=bearer(keys["admin"])).json()
    assert got["type"] == "dict" and got["algorithm"] == "fedmm-dl"
    bad = {**body, "id": "d-b", "algorithm_params": {"lam": -1}}
    r = client.post("/api/v1/jobs", json=bad, headers=bearer(keys["admin"]))
    assert r.status_code == 422 and "lam" in r.text and "l1 penalty" in r.text


PCA3 = {"type": "pca", "features": ["a", "b", "c"]}  # gmm is the default family: PCA settings name their type


@pytest.mark.parametrize(("body", "field", "problem"), [
    ({"type": "pca", "features": ["a", "b"], "rank": 2}, "body.rank", "must be smaller than the number of features"),
    ({**PCA3, "fraction": 0}, "body.fraction", "must be in (0, 1]"),
    ({**PCA3, "algorithm": "fedavg"}, "body.algorithm", "must be one of"),
    ({**PCA3, "rank": 0}, "body.rank", "must be at least 1"),
    ({"type": "pca", "features": ["a", "a", "b"]}, "body.features", "distinct"),
    ({"features": ["a", "b", "c"], "type": "graph"}, "body.type", "must be one of pca, gmm, dict, otmap, recsys"),
    ({"type": ""}, "body.type", "must be one of pca, gmm, dict, otmap, recsys"),
    ({"detector": "recsys", "items": [1, 2, 3]}, "body.type",
     "detector: one of the anomaly detectors, gmm, dict, otmap, pca"),
    ({"type": "recsys"}, "body.items", "needs the item catalogue"),
    ({"type": "recsys", "items": [1, 2, 3], "rank": 1, "features": ["a", "b", "c"]}, "body.features",
     "not a setting of a recsys job"),
    ({"type": "recsys", "items": [1, 2, 3], "rank": 3}, "body.rank", "smaller than the number of items"),
    ({"type": "recsys", "items": [1, 2, 3], "algorithm": "fedmm", "rank": 1}, "body.algorithm", "recsys job"),
    ({**PCA3, "rounds": "many"}, "body.rounds", "valid integer"),
    ({**PCA3, "colour": "red"}, "body.colour", "not a setting of a"),
    ({"features": ["a"]}, "body.features", "2 to 1000 feature names"),
    ({**PCA3, "rank": 1, "algorithm_params": {"rho": 3}}, "body.algorithm_params.rho",
     "not a parameter of fedmm"),
    ({**PCA3, "rank": 1, "algorithm": "fedpg", "algorithm_params": {"local_steps": 2.5}},
     "body.algorithm_params.local_steps", "whole number"),
    ({**PCA3, "rank": 1, "algorithm": "fedpg", "algorithm_params": {"local_steps": 10**6}},
     "body.algorithm_params", "between 1 and 1000"),
    ({**PCA3, "rank": 1, "algorithm": "fedpg", "algorithm_params": {"aggregator": "mode"}},
     "body.algorithm_params", "aggregator"),
    ({**PCA3, "rank": 1, "max_share": 1.5}, "body.max_share", "must be in (0, 1]"),
    ({**PCA3, "rank": 1, "max_records": 0}, "body.max_records", "between 1 and 10^12"),
    ({**PCA3, "rank": 1, "influence": -1}, "body.influence", "must be in (0, 10^6]"),
    ({"type": "recsys", "items": [1, 2, 3], "rank": 1, "max_share": 0.5}, "body.max_share", "recsys job"),
    ({"type": "gmm", "features": ["a", "b", "c"], "holdout": 0.9}, "body.holdout", "must be in [0.05, 0.5]"),
    ({"type": "gmm", "features": ["a", "b", "c"], "algorithm_params": {"components": 0}}, "body.algorithm_params",
     "components must be between 1 and 1024"),
    ({**PCA3, "rank": 1, "categorical": ["a"]}, "body.categorical", "none of them a feature"),
    ({**PCA3, "rank": 1, "holdout": 0.2}, "body.holdout", "not a setting of a pca job"),
])
def test_invalid_jobs_name_the_field(client, keys, body, field, problem):
    r = client.post("/api/v1/jobs", json=body, headers=bearer(keys["admin"]))
    assert r.status_code == 422
    details = r.json()["detail"]
    assert any(d["field"] == field and problem in d["problem"] for d in details), details


def test_anomalies_filters_pagination_and_acknowledgement(app, client, keys):
    populate(app)
    h = bearer(keys["viewer"])
    seen, cursor = [], None
    while True:
        page = client.get("/api/v1/anomalies", params={"limit": 60, **({"cursor": cursor} if cursor else {})},
                          headers=h).json()
        seen += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == 250 and len({a["id"] for a in seen}) == 250
    assert [a["ts"] for a in seen] == sorted((a["ts"] for a in seen), reverse=True)
    only = client.get("/api/v1/anomalies", params={"device": "dev-2", "min_score": 100, "limit": 500}, headers=h)
    items = only.json()["items"]
    assert items and all(a["device_id"] == "dev-2" and a["score"] >= 100 for a in items)
    assert len(items) == len([i for i in range(100, 250) if i % 5 == 2])
    one = items[0]
    assert client.get(f"/api/v1/anomalies/{one['id']}", headers=h).json()["explanation"][0]["feature"] == "a"
    acked = client.post(f"/api/v1/anomalies/{one['id']}/ack", headers=bearer(keys["admin"])).json()
    assert acked["acknowledged"] and acked["acknowledged_at"]
    unacked = client.get("/api/v1/anomalies", params={"acknowledged": False, "limit": 500}, headers=h).json()
    assert len(unacked["items"]) == 249


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": 0}, "query.limit"), ({"limit": 501}, "query.limit"), ({"min_score": "high"}, "query.min_score"),
    ({"since": "yesterday"}, "query.since"), ({"cursor": "garbage"}, "query.cursor"),
    ({"acknowledged": "maybe"}, "query.acknowledged"), ({"device": "../etc"}, "query.device"),
])
def test_malformed_filters_are_4xx_naming_the_field(client, keys, params, field):
    r = client.get("/api/v1/anomalies", params=params, headers=bearer(keys["viewer"]))
    assert r.status_code in (400, 422)
    assert any(d["field"] == field for d in r.json()["detail"]), r.json()


def test_devices_models_promotion_and_metrics(app, client, keys):
    populate(app, n_alerts=3)
    h = bearer(keys["admin"])
    devices = client.get("/api/v1/devices", params={"limit": 2}, headers=h).json()
    assert [d["id"] for d in devices["items"]] == ["dev-0", "dev-1"] and devices["next_cursor"]
    rest = client.get("/api/v1/devices", params={"cursor": devices["next_cursor"]}, headers=h).json()
    assert [d["id"] for d in rest["items"]] == ["dev-2", "dev-3", "dev-4"]
    assert [d["id"] for d in client.get("/api/v1/devices", params={"online": True}, headers=h).json()["items"]] == [
        "dev-0", "dev-2", "dev-4"]
    models = client.get("/api/v1/jobs/job-1/models", headers=h).json()
    assert [(m["version"], m["promoted"]) for m in models] == [(1, False), (2, True)] and models[0]["Z"] is None
    first = models[0]["id"]
    assert len(client.get(f"/api/v1/models/{first}", params={"matrix": True}, headers=h).json()["Z"]) == 4
    back = client.post(f"/api/v1/models/{first}/promote", headers=h).json()
    assert back["promoted"] and not back["published"]  # the coordinator publishes it next
    assert [m["promoted"] for m in client.get("/api/v1/jobs/job-1/models", headers=h).json()] == [True, False]
    job = client.get("/api/v1/jobs/job-1", headers=h).json()
    assert [r["metrics"]["subspace_change"] for r in job["rounds"]] == [0.1, 0.01, 0.001]
    text = client.get("/metrics", headers=h).text
    assert "fedsentry_rounds_total 3.0" in text and "fedsentry_alerts_ingested_total 3.0" in text
    assert "fedsentry_devices_online 3.0" in text
    assert 'fedsentry_uploads_total{outcome="accepted",reason=""} 3.0' in text
    svg = client.get("/charts/jobs/job-1/convergence.svg", headers=h)
    assert svg.headers["content-type"].startswith("image/svg+xml") and "<path" in svg.text


def test_every_job_family_has_a_convergence_chart(app, client, keys):
    """A finished recommendation job reports how much its item factors moved: drawn, not 'no rounds yet'."""
    with app.state.sessions.begin() as s:
        s.add(Job(id="rec-1", type="recsys", algorithm="fedmc-admm", params={}, status="finished", phase="finished"))
        for r in range(1, 5):
            s.add(Round(job_id="rec-1", round=r, phase="train", sampled=["a"], answered=["a"],
                        metrics={"item_change": 0.5 ** r}, seconds=0.1))
    svg = client.get("/charts/jobs/rec-1/convergence.svg", headers=bearer(keys["viewer"])).text
    assert "<path" in svg and "item factors" in svg and "no rounds yet" not in svg


def test_dashboard_session_cookie(app, client, keys):
    r = client.post("/login", data={"key": "fsk_wrong_key"}, follow_redirects=False)
    assert r.status_code == 401 and "unknown or revoked" in r.text
    r = client.post("/login", data={"key": keys["viewer"]}, follow_redirects=False)
    cookie = r.headers["set-cookie"]
    assert r.status_code == 303 and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert client.get("/").status_code == 200
    assert client.get("/api/v1/devices").status_code == 200  # the cookie authenticates API calls too
    assert client.post("/api/v1/jobs/job-1/cancel").status_code == 403  # still a viewer
    # revoking the key ends the session
    from store.db import ApiKey

    with app.state.sessions.begin() as s:
        for k in s.query(ApiKey).filter_by(role="viewer"):
            k.revoked = True
    assert client.get("/api/v1/devices").status_code == 401


def test_apikey_cli_prints_the_key_alone_on_the_last_line(tmp_path):
    import subprocess
    import sys

    db = f"sqlite:///{tmp_path}/k.db"
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "apikey", "create", "--role", "admin", "--name",
                          "alice@soc", "--db", db], capture_output=True, text=True, timeout=60)
    key = out.stdout.strip().splitlines()[-1]
    assert out.returncode == 0 and key.startswith("fsk_") and len(key) > 40
    listed = subprocess.run([sys.executable, "-m", "fedsentry.cli", "apikey", "list", "--db", db],
                            capture_output=True, text=True, timeout=60).stdout
    key_id = key.split("_")[1]
    assert key_id in listed and key not in listed and "active" in listed and "alice@soc" in listed
    bad = subprocess.run([sys.executable, "-m", "fedsentry.cli", "apikey", "create", "--role", "admin", "--name",
                          "<script>", "--db", db], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--name" in bad.stderr and "fsk_" not in bad.stdout
    subprocess.run([sys.executable, "-m", "fedsentry.cli", "apikey", "revoke", key_id, "--db", db], check=True,
                   capture_output=True, timeout=60)
    assert "revoked" in subprocess.run([sys.executable, "-m", "fedsentry.cli", "apikey", "list", "--db", db],
                                       capture_output=True, text=True, timeout=60).stdout


def test_recommendations_for_a_new_user_by_fold_in(app, client, keys):
    from store.db import Job, ModelVersion, pack

    h = bearer(keys["viewer"])
    body = {"ratings": {"10": 5.0, "20": 1.0}, "n": 3}
    assert client.post("/api/v1/recommendations", json=body, headers=h).status_code == 409  # no model yet
    rng = np.random.default_rng(0)
    items = list(range(10, 110, 10))
    V = np.column_stack([rng.standard_normal((10, 2)), np.linspace(-1, 1, 10)])
    with app.state.sessions.begin() as s:
        s.add(Job(id="rs", type="recsys", algorithm="fedmc-admm", params={}, status="finished"))
        s.add(ModelVersion(job_id="rs", version=1, type="recsys", round=5, promoted=True, published=True,
                           arrays=pack({"item_factors": V}),
                           info={"items": items, "mean": 3.5, "rating_min": 0.5, "rating_max": 5.0, "lam": 1.0}))
    # a recommendation model is shown as what it is: its catalogue, no PCA fields, its item factors
    (mv,) = client.get("/api/v1/jobs/rs/models", headers=h).json()
    assert mv["info"]["items"] == items and mv["features"] is None and mv["threshold"] is None
    full = client.get(f"/api/v1/models/{mv['id']}", params={"matrix": True}, headers=h).json()
    assert np.allclose(full["arrays"]["item_factors"], V) and full["Z"] is None
    r = client.post("/api/v1/recommendations", json=body, headers=h)
    assert r.status_code == 200, r.text
    got = r.json()
    assert len(got["items"]) == 3 and {x["item"] for x in got["items"]}.isdisjoint({10, 20})
    scores = [x["predicted_rating"] for x in got["items"]]
    assert scores == sorted(scores, reverse=True) and all(0.5 <= x <= 5 for x in scores)
    for bad, problem in (({"999": 4.0}, "unknown item id 999"), ({"10": 9.0}, "outside the range")):
        r = client.post("/api/v1/recommendations", json={"ratings": bad}, headers=h)
        assert r.status_code == 422 and problem in r.json()["detail"][0]["problem"]
    assert client.post("/api/v1/recommendations", json={"ratings": {}}, headers=h).status_code == 422


def test_anomalies_serve_the_flow_of_their_record(app, client, keys):
    from store.db import Alert, utcnow

    good = {"uid": "CHhAvVGS1DHFjwGM9", "id.orig_h": "192.168.1.20", "id.orig_p": "51234", "proto": "tcp"}
    with app.state.sessions.begin() as s:
        s.add(Alert(id="with-flow", device_id="dev-0", job_id="job-1", model_version=1, ts=utcnow(), score=5.0,
                    threshold=1.0, explanation=[], flow=good))
        s.add(Alert(id="bad-flow", device_id="dev-0", job_id="job-1", model_version=1, ts=utcnow(), score=5.0,
                    threshold=1.0, explanation=[], flow={"uid": {"nested": 1}}))  # stored before checks existed
    items = {a["id"]: a for a in client.get("/api/v1/anomalies", headers=bearer(keys["viewer"])).json()["items"]}
    assert items["with-flow"]["flow"] == good and items["bad-flow"]["flow"] is None


def test_detector_is_the_type_by_the_command_line_s_name(client, keys):
    admin = bearer(keys["admin"])
    r = client.post("/api/v1/jobs", json={"id": "d-1", "detector": "pca", "features": ["a", "b", "c"], "rank": 1},
                    headers=admin)
    assert r.status_code == 201 and r.json()["type"] == "pca", r.text
    r = client.post("/api/v1/jobs", json={"id": "d-2", "features": ["a", "b", "c"]}, headers=admin)
    assert r.status_code == 201 and r.json()["type"] == "gmm" and r.json()["algorithm"] == "fedem"
    r = client.post("/api/v1/jobs", json={"detector": "pca", "type": "gmm", "features": ["a", "b"]}, headers=admin)
    assert r.status_code == 422 and any(d["field"] == "body.detector" for d in r.json()["detail"]), r.text


def test_a_null_type_is_the_default_family(client, keys):
    r = client.post("/api/v1/jobs", json={"type": None, "features": ["a", "b"]}, headers=bearer(keys["admin"]))
    assert r.status_code == 201 and r.json()["type"] == "gmm", r.text


def test_every_time_the_api_gives_says_it_is_utc(client, keys):
    """API times carried no time zone: a client had to guess (the dashboard appended "Z" itself)."""
    from datetime import datetime

    r = client.post("/api/v1/jobs", json={"features": ["a", "b"]}, headers=bearer(keys["admin"]))
    for when in (r.json()["created"], r.json()["updated"]):
        assert when.endswith("Z") and datetime.fromisoformat(when.replace("Z", "+00:00")).tzinfo is not None
