"""Dashboard sessions live on the server: signing out or revoking the key ends them at once. Changes
made with the cookie must come from the dashboard's own origin; bearer keys are exempt."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from store.db import ApiKey, DashboardSession, utcnow
from tests.api.conftest import bearer, populate

OWN = "http://testserver"  # TestClient's origin


def signed_in(app, key: str) -> TestClient:
    client = TestClient(app)
    r = client.post("/login", data={"key": key}, headers={"Origin": OWN}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return client


def test_a_cookie_captured_before_sign_out_is_refused_after(app, keys):
    client = signed_in(app, keys["admin"])
    captured = client.cookies["fedsentry_session"]
    assert client.get("/api/v1/devices").status_code == 200
    r = client.post("/logout", headers={"Origin": OWN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    thief = TestClient(app)
    thief.cookies.set("fedsentry_session", captured)
    r = thief.get("/api/v1/devices")
    assert r.status_code == 401 and "signed out" in r.json()["detail"]
    assert thief.get("/", follow_redirects=False).headers["location"] == "/login"
    with app.state.sessions() as s:
        assert s.query(DashboardSession).count() == 0


def test_revoking_a_key_ends_all_its_sessions(app, keys):
    first, second = signed_in(app, keys["viewer"]), signed_in(app, keys["viewer"])
    other = signed_in(app, keys["admin"])
    with app.state.sessions.begin() as s:
        for k in s.query(ApiKey).filter_by(role="viewer"):
            k.revoked = True
    assert first.get("/api/v1/devices").status_code == 401 and second.get("/api/v1/devices").status_code == 401
    assert other.get("/api/v1/devices").status_code == 200


def test_sessions_expire_on_the_server_and_only_the_tokens_hash_is_stored(app, keys):
    client = signed_in(app, keys["viewer"])
    token = client.cookies["fedsentry_session"]
    with app.state.sessions.begin() as s:
        (row,) = s.query(DashboardSession)
        assert row.id == hashlib.sha256(token.encode()).hexdigest()
        row.expires = utcnow() - timedelta(seconds=1)  # the browser would still send the cookie
    assert client.get("/api/v1/devices").status_code == 401


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 403),  # neither Origin nor Referer: not from the dashboard
    ({"Origin": "http://testserver:8001"}, 403),  # another port of the same host: same site, other origin
    ({"Origin": "https://testserver"}, 403),
    ({"Origin": "http://evil.example"}, 403),
    ({"Origin": "null"}, 403),
    ({"Origin": "null", "Referer": f"{OWN}/"}, 403),  # an opaque origin is not made good by a Referer
    ({"Referer": "http://testserver:8001/page"}, 403),
    ({"Origin": "http://testserver"}, 200),
    ({"Origin": "http://TestServer:80"}, 200),
    ({"Referer": f"{OWN}/"}, 200),  # some browsers omit Origin on same-origin requests
])
def test_cookie_changes_need_the_dashboards_own_origin(app, keys, headers, status):
    populate(app, n_alerts=1)
    client = signed_in(app, keys["admin"])
    alert_id = client.get("/api/v1/anomalies").json()["items"][0]["id"]
    r = client.post(f"/api/v1/anomalies/{alert_id}/ack", headers=headers)
    assert r.status_code == status, r.text
    if status == 403:
        assert "cross-site" in r.json()["detail"]
        assert not client.get(f"/api/v1/anomalies/{alert_id}").json()["acknowledged"]  # reads need no Origin


def test_bearer_keys_need_no_origin_and_a_cookie_does_not_override_them(app, keys):
    populate(app, n_alerts=1)
    client = signed_in(app, keys["viewer"])  # a viewer's cookie, an admin's key
    r = client.post("/api/v1/jobs/job-1/cancel", headers=bearer(keys["admin"]))
    assert r.status_code == 409 and "finished" in r.json()["detail"]  # got to the route: the key decided


def test_a_viewer_cookie_from_the_dashboard_still_cannot_change(app, keys):
    populate(app, n_alerts=1)
    client = signed_in(app, keys["viewer"])
    r = client.post("/api/v1/jobs/job-1/cancel", headers={"Origin": OWN})
    assert r.status_code == 403 and "admin role" in r.json()["detail"]


def test_public_origin_setting_names_the_origin_behind_a_proxy(tmp_path):
    from api.security import create_key

    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db", cookie_secure=False,
                              public_origin="https://fedsentry.example"))
    populate(app, n_alerts=1)
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    client = TestClient(app)
    assert client.post("/login", data={"key": key}, headers={"Origin": OWN}).status_code == 403
    assert client.post("/login", data={"key": key}, headers={"Origin": "https://fedsentry.example"},
                       follow_redirects=False).status_code == 303
    assert client.post("/api/v1/jobs/job-1/cancel", headers={"Origin": OWN}).status_code == 403
    assert client.post("/api/v1/jobs/job-1/cancel", headers={"Origin": "https://fedsentry.example"}).status_code == 409


def test_sign_in_and_out_refuse_other_origins(app, keys):
    client = TestClient(app)
    r = client.post("/login", data={"key": keys["admin"]}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "fedsentry_session" not in client.cookies
    client = signed_in(app, keys["admin"])
    assert client.post("/logout", headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.get("/api/v1/devices").status_code == 200  # still signed in


def test_an_open_stream_ends_when_its_session_does(app, keys):
    import time

    import httpx

    from tests.api.conftest import serve

    token = signed_in(app, keys["viewer"]).cookies["fedsentry_session"]
    with serve(app) as url, httpx.Client(base_url=url, cookies={"fedsentry_session": token}, timeout=15) as client:
        with client.stream("GET", "/api/v1/anomalies/stream") as stream:
            assert stream.status_code == 200
            chunks = stream.iter_text()
            next(chunks)
            r = client.post("/logout", headers={"Origin": url}, follow_redirects=False)
            assert r.status_code == 303
            deadline, ended = time.monotonic() + 12, True
            for _ in chunks:  # keep-alives every half second until the server closes the stream
                if time.monotonic() > deadline:
                    ended = False
                    break
        assert ended, "the stream outlived the session"
