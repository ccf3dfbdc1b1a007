"""Inputs that used to reach the database unchecked, on SQLite and PostgreSQL: forged cursors, time zones,
non-finite or huge numbers, NUL bytes, malformed ids. Each is a 4xx naming the field, never a 5xx."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from api.security import create_key
from store.db import Alert, utcnow
from tests.api.conftest import bearer, populate


def cursor(values) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


@pytest.fixture
def api(any_app):
    populate(any_app, n_alerts=30)
    with any_app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    return TestClient(any_app, raise_server_exceptions=False, headers=bearer(key))


TS = "2026-01-01T00:00:00"
FORGED_CURSORS = [
    ("/api/v1/anomalies", [TS, {"a": 1}]),  # an object where the id goes
    ("/api/v1/anomalies", [TS, int("9" * 300)]),  # a 300-digit number: no 64-bit column holds it
    ("/api/v1/anomalies", [int("9" * 300), "x"]),
    ("/api/v1/anomalies", [TS, "a\x00b"]),  # PostgreSQL refuses NUL bytes
    ("/api/v1/anomalies", [TS + "+05:00", ["x"]]),
    ("/api/v1/anomalies", [TS, "x" * 65]),
    ("/api/v1/anomalies", ["0001-01-01T00:00:00+05:00", "x"]),
    ("/api/v1/anomalies", [TS]),
    ("/api/v1/jobs", [TS, {"a": 1}]),
    ("/api/v1/jobs", [None, "x"]),
    ("/api/v1/jobs", [TS, 2**64]),
    ("/api/v1/devices", ["a\x00b"]),
    ("/api/v1/devices", [{"id": "dev-1"}]),
    ("/api/v1/devices", [2**70]),
]


NOT_EVEN_LISTS = ["9" * 400, cursor([TS, int("9" * 400)]), "[", "%%%", "x" * 5000,
                  base64.urlsafe_b64encode(b"[" * 300).decode()]


def wrong(r, statuses: tuple[int, ...], field: str) -> bool:
    """Whether the answer is not one of the statuses with a detail naming the field."""
    if r.status_code not in statuses:
        return True
    detail = r.json()["detail"]
    return not any(d["field"] == field for d in detail)


def test_forged_cursors_are_400(api):
    asked = [(path, cursor(values)) for path, values in FORGED_CURSORS]
    asked += [("/api/v1/anomalies", raw) for raw in NOT_EVEN_LISTS]
    bad = [(path, raw, r.status_code, r.text[:120]) for path, raw in asked
           if wrong(r := api.get(path, params={"cursor": raw}), (400, 422), "query.cursor")]
    assert not bad, bad


def test_cursors_the_api_returned_still_page_through_everything(api):
    for path, n in (("/api/v1/anomalies", 30), ("/api/v1/devices", 5)):
        seen, nxt = [], None
        while True:
            page = api.get(path, params={"limit": 4, **({"cursor": nxt} if nxt else {})}).json()
            seen += [x["id"] for x in page["items"]]
            if not (nxt := page["next_cursor"]):
                break
        assert len(set(seen)) == n


def _ids(api, **params) -> set[str]:
    r = api.get("/api/v1/anomalies", params={"limit": 500, **params})
    assert r.status_code == 200, r.text
    return {a["id"] for a in r.json()["items"]}


def test_since_and_until_mix_naive_and_aware_times_as_utc(any_app, api):
    t0 = datetime(2026, 3, 1, 12, 0, 0)  # stored as naive UTC
    with any_app.state.sessions.begin() as s:
        for i in range(6):  # one alert per hour, 12:00 to 17:00 UTC
            s.add(Alert(id=f"tz-{i}", device_id="dev-tz", job_id="job-1", model_version=2, ts=t0 + timedelta(hours=i),
                        score=5.0, threshold=3.0, explanation=[]))
    # naive since, aware until: the case that was a 500
    assert _ids(api, device="dev-tz", since="2026-03-01T13:00:00", until="2026-03-01T17:00:00+02:00") == {
        "tz-1", "tz-2"}  # 17:00+02:00 is 15:00 UTC: 13:00 and 14:00
    # offsets are respected on both ends: 15:00+02:00 = 13:00 UTC, 12:30-02:00 = 14:30 UTC
    assert _ids(api, device="dev-tz", since="2026-03-01T15:00:00+02:00", until="2026-03-01T12:30:00-02:00") == {
        "tz-1", "tz-2"}
    assert _ids(api, device="dev-tz", since="2026-03-01T14:00:00Z") == {"tz-2", "tz-3", "tz-4", "tz-5"}
    assert _ids(api, device="dev-tz", until="2026-03-01T14:00:00+00:00") == {"tz-0", "tz-1"}
    r = api.get("/api/v1/anomalies", params={"since": "2026-03-01T15:00:00+02:00", "until": "2026-03-01T13:00:00"})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "query.since"  # the same instant
    for field in ("since", "until"):
        r = api.get("/api/v1/anomalies", params={field: "0001-01-01T00:00:00+05:00"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == f"query.{field}", r.text


RECSYS = {"type": "recsys", "items": [1, 2, 3, 4], "rank": 1}


def post_json(api, body: str):
    return api.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/json"})


def test_non_finite_floats_are_422_naming_the_field(api):
    bad = []
    for field in ("rating_min", "rating_max", "fraction", "deadline", "quantile"):
        for value in ("-Infinity", "Infinity", "NaN", "1e400", "-1e400"):
            r = post_json(api, json.dumps(RECSYS)[:-1] + f', "{field}": {value}}}')
            if wrong(r, (422,), f"body.{field}"):
                bad.append((field, value, r.status_code, r.text[:120]))
    assert not bad, bad


JOB_BODIES = [
    ('{"features": ["a", "b", "c"], "rank": 1, "algorithm": "fedpg", "algorithm_params": {"rho": NaN}}',
     "body.algorithm_params.rho"),
    ('{"features": ["a", "b", "c"], "rank": 1, "algorithm": "fedpg", "algorithm_params": {"rho": -Infinity}}',
     "body.algorithm_params.rho"),
    ('{"features": ["a", "b", "c"], "rank": 1, "algorithm": "fedpg", "algorithm_params": {"rho": 1' + "0" * 30 + '}}',
     "body.algorithm_params.rho"),
    ('{"features": ["a", "b", "c"], "rank": 1, "algorithm": "fedpg", "algorithm_params": {"rho": [1]}}',
     "body.algorithm_params.rho"),
    ('{"features": ["a", "b", "c"], "rank": 1, "algorithm": "fedpg", "algorithm_params": {"aggregator": "m\\u0000"}}',
     "body.algorithm_params.aggregator"),
    ('{"type": "recsys", "items": [9223372036854775808, 2, 3], "rank": 1}', "body.items.0"),
    ('{"type": "recsys", "items": [1, 2, "x\\u0000"], "rank": 1}', "body.items.2"),
    ('{"type": "recsys", "items": [1, 2, true], "rank": 1}', "body.items.2"),
    ('{"features": ["a\\u0000", "b", "c"], "rank": 1}', "body.features.0"),
    ('{"features": ["a", "b", "c"], "rank": 1, "algorithm": "fed\\u0000pg"}', "body.algorithm"),
    ('{"features": ["a", "b", "c"], "rank": 1, "seed": 1' + "0" * 400 + '}', "body.seed"),
    ('{"features": ["a", "b", "c"], "rounds": 18446744073709551616}', "body.rounds"),
    ('{"id": "j\\u0000", "features": ["a", "b", "c"], "rank": 1}', "body.id"),
]


def test_job_bodies_the_database_would_refuse_are_422(api):
    bad = [(body, r.status_code, r.text[:160]) for body, field in JOB_BODIES
           if wrong(r := post_json(api, body), (422,), field)]
    assert not bad, bad


def test_large_item_ids_are_stored(api):
    r = api.post("/api/v1/jobs", json={**RECSYS, "items": [2**53, -(2**53), 3, 4]})
    assert r.status_code == 201, r.text


IN_THE_URL = [
    ("GET", "/api/v1/jobs/a%00b", "path.job_id"), ("POST", "/api/v1/jobs/a%00b/cancel", "path.job_id"),
    ("GET", "/api/v1/jobs/a%00b/models", "path.job_id"), ("GET", "/api/v1/anomalies/a%00b", "path.alert_id"),
    ("POST", "/api/v1/anomalies/a%00b/ack", "path.alert_id"), ("GET", "/api/v1/anomalies/" + "x" * 65, "path.alert_id"),
    ("GET", "/charts/jobs/a%00b/convergence.svg", "path.job_id"),
    ("GET", "/api/v1/models/99999999999999999999", "path.model_id"),
    ("GET", "/api/v1/anomalies?device=a%00b", "query.device"), ("GET", "/api/v1/anomalies?job=a%00b", "query.job"),
    ("GET", "/api/v1/anomalies?limit=99999999999999999999", "query.limit"),
    ("GET", "/api/v1/anomalies?min_score=nan", "query.min_score"),
    ("GET", "/api/v1/anomalies?min_score=1e400", "query.min_score"),
    ("GET", "/api/v1/devices?limit=-99999999999999999999", "query.limit"),
]


def test_ids_and_numbers_in_the_url_are_checked_before_the_database(api):
    bad = [(method, path, r.status_code, r.text[:120]) for method, path, field in IN_THE_URL
           if wrong(r := api.request(method, path), (422,), field)]
    assert not bad, bad


def test_keys_and_cookies_with_nul_bytes_are_401(any_app):
    client = TestClient(any_app, raise_server_exceptions=False)
    assert client.get("/api/v1/jobs", headers=bearer("fsk_a\x00b_" + "c" * 43)).status_code == 401
    assert client.post("/login", data={"key": "fsk_" + "\x00" * 12 + "_" + "c" * 43}).status_code == 401
    client.cookies.set("fedsentry_session", "\x00" * 43)
    assert client.get("/api/v1/jobs").status_code == 401
    assert client.get("/", follow_redirects=False).headers["location"] == "/login"


def test_alerts_stored_now_are_listed_with_aware_and_naive_filters_alike(any_app, api):
    now = utcnow()
    with any_app.state.sessions.begin() as s:
        s.add(Alert(id="now", device_id="dev-now", job_id="job-1", model_version=2, ts=now, score=1.0,
                    threshold=3.0, explanation=[]))
    naive = (now - timedelta(minutes=1)).isoformat()
    aware = (now - timedelta(minutes=1)).isoformat() + "+00:00"
    assert _ids(api, device="dev-now", since=naive) == _ids(api, device="dev-now", since=aware) == {"now"}


@pytest.fixture
def recommender(any_app, api):
    import numpy as np

    from store.db import Job, ModelVersion, pack

    with any_app.state.sessions.begin() as s:
        s.add(Job(id="rs", type="recsys", algorithm="fedmc-admm", params={}, status="finished"))
        s.add(ModelVersion(job_id="rs", version=1, type="recsys", round=5, promoted=True, published=True,
                           arrays=pack({"item_factors": np.ones((4, 2))}),
                           info={"items": [1, 2, 3, 4], "mean": 3.5, "rating_min": 0.5, "rating_max": 5.0, "lam": 1.0}))
    return api


RATINGS = [
    ('{"' + "9" * 150 + '": 3.0}', "unknown item id"),  # no 64-bit id: numpy overflowed converting it
    ('{"-' + "9" * 30 + '": 3.0}', "unknown item id"),
    ('{"\u00b2": 3.0}', "unknown item id"),  # "²".isdigit() is true, int("²") is not a number
    ('{"1": NaN}', "finite number"),
    ('{"1": Infinity}', "finite number"),
    ('{"1\\u0000": 3.0}', "printable"),
]


def test_recommendation_ratings_are_checked(recommender):
    bad = []
    for ratings, problem in RATINGS:
        r = recommender.post("/api/v1/recommendations", content='{"ratings": ' + ratings + "}",
                             headers={"Content-Type": "application/json"})
        if r.status_code != 422 or not any(d["field"].startswith("body.ratings") and problem in d["problem"]
                                           for d in r.json()["detail"]):
            bad.append((ratings[:40], r.status_code, r.text[:120]))
    assert not bad, bad
    assert recommender.post("/api/v1/recommendations", json={"ratings": {"1": 5.0}}).status_code == 200


#: the dashboard's charts take the alert filter too, but OpenAPI leaves them out
CHARTS = ["/charts/alerts-over-time.svg", "/charts/alerts-per-device.svg"]


def _date_parameters(app) -> list[tuple[str, str]]:
    """Every (GET path, query parameter) taking a time: found in the OpenAPI schema, so that a new route or
    parameter is covered without editing this test, and the charts."""
    found = []
    for path, ops in app.openapi()["paths"].items():
        for p in ops.get("get", {}).get("parameters", []):
            schema = p.get("schema", {})
            formats = {schema.get("format")} | {s.get("format") for s in schema.get("anyOf", [])}
            if p["in"] == "query" and "date-time" in formats and "{" not in path:
                found.append((path, p["name"]))
    return found + [(path, name) for path in CHARTS for name in ("since", "until")]


EXTREMES = ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00", "0001-01-01T00:00:00-05:00", "0001-01-02T00:00:00",
            "1969-12-31T23:59:59Z", "1970-01-01T00:00:00", "9999-12-31T23:59:59", "9999-12-31T23:59:59Z",
            "9999-12-31T23:59:59-05:00", "9999-12-31T23:59:59+05:00", "2000-01-01T00:00:00"]


def test_no_date_any_parameter_takes_sends_the_api_to_a_5xx(any_app, api):
    """Property (issue 28): over every date parameter of every listing, alone and in pairs, any time from year
    1 to 9999 (naive, Z or an offset) is answered 2xx or a 4xx naming the field, never a 5xx."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    params = _date_parameters(any_app)
    assert {"since", "until"} <= {name for _, name in params} and len({path for path, _ in params}) >= 5, params
    times = st.one_of(
        st.sampled_from(EXTREMES),
        st.builds(lambda t, tz: t.isoformat() + tz, st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59)),
                  st.sampled_from(["", "Z", "+14:00", "-12:00", "+05:30"])))

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(path=st.sampled_from(sorted({path for path, _ in params})), since=st.none() | times,
           until=st.none() | times)
    def check(path, since, until):
        query = {k: v for k, v in (("since", since), ("until", until)) if v is not None}
        r = api.get(path, params=query)
        assert r.status_code < 500, (path, query, r.status_code, r.text[:200])

    for path, name in params:  # every parameter alone at every extreme, then the property over pairs
        for t in EXTREMES:
            r = api.get(path, params={name: t})
            assert r.status_code < 500, (path, name, t, r.status_code, r.text[:200])
            if r.status_code >= 400:
                assert any(d["field"] == f"query.{name}" for d in r.json()["detail"]), r.text
    check()


def test_a_private_recsys_job_is_422_for_an_algorithm_without_summable_uploads(api, monkeypatch):
    """A job's secure sums (coordinator.private_recsys) run every federated algorithm; one whose uploads are not
    summable (none of its `summed`) is refused by name, not run in plaintext."""
    from models.recsys.fedmavg import FedMAvg

    for algorithm in ("fedmavg", "fedmc-admm", "altgdmin"):
        assert api.post("/api/v1/jobs", json={**RECSYS, "algorithm": algorithm, "private": True}).status_code == 201
    monkeypatch.setattr(FedMAvg, "summed", {})
    r = api.post("/api/v1/jobs", json={**RECSYS, "algorithm": "fedmavg", "private": True})
    assert r.status_code == 422 and not wrong(r, (422,), "body.private"), r.text
    assert "fedmavg has no summable uploads" in r.text
