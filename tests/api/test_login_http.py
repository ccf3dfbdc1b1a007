"""Signing in over plain http at an address that is not loopback: the session cookie is Secure (the default),
so the browser would drop it and bounce back to /login without a word. The sign-in page says so instead, and
what to do. Through a real uvicorn server, reached with the Host header a browser would send (the traffic
itself only ever goes to 127.0.0.1)."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from store.db import DashboardSession
from tests.api.conftest import serve

REMOTE = "192.0.2.10:8000"  # TEST-NET-1: named in the Host header only


def make_app(tmp_path, **settings):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db", **settings))
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    return app, key


def sign_in(url: str, key: str, host: str, origin: str | None = None, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/login", data={"key": key}, follow_redirects=False, timeout=10,
                      headers={"Host": host, "Origin": origin or f"http://{host}", **headers})


def sessions(app) -> int:
    with app.state.sessions() as s:
        return s.query(DashboardSession).count()


def test_plain_http_at_a_remote_address_is_refused_with_what_to_do(tmp_path):
    app, key = make_app(tmp_path)  # cookie_secure: the default of `fedsentry serve`
    with serve(app) as url:
        page = httpx.get(f"{url}/login", headers={"Host": REMOTE}, timeout=10)
        r = sign_in(url, key, REMOTE)
    assert page.status_code == 200 and "Signing in cannot work at this address" in page.text
    assert r.status_code == 400 and "set-cookie" not in r.headers and sessions(app) == 0
    for what in ("Secure", f"plain http://{REMOTE}", "HTTPS", "FEDSENTRY_PUBLIC_ORIGIN=https://",
                 "fedsentry serve --insecure-cookie", "trusted network"):
        assert what in r.text, what
    assert '<p class="error" role="alert">' in r.text  # the sign-in page, with the reason where errors go


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "127.0.0.2:{port}"])
def test_loopback_addresses_keep_the_secure_cookie_and_sign_in(tmp_path, host):
    app, key = make_app(tmp_path)
    with serve(app) as url:
        host = host.format(port=url.rsplit(":", 1)[1])
        page = httpx.get(f"{url}/login", headers={"Host": host}, timeout=10)
        r = sign_in(url, key, host)
    assert page.status_code == 200 and "cannot work" not in page.text
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert "; secure" in r.headers["set-cookie"].lower() and sessions(app) == 1


def test_insecure_cookie_signs_in_over_plain_http_anywhere(tmp_path):
    app, key = make_app(tmp_path, cookie_secure=False)  # fedsentry serve --insecure-cookie
    with serve(app) as url:
        assert "cannot work" not in httpx.get(f"{url}/login", headers={"Host": REMOTE}, timeout=10).text
        r = sign_in(url, key, REMOTE)
    assert r.status_code == 303 and "secure" not in r.headers["set-cookie"].lower()


def test_the_public_origin_setting_decides_the_scheme(tmp_path):
    """Behind a TLS proxy the server sees plain http; FEDSENTRY_PUBLIC_ORIGIN says what the browser sees."""
    app, key = make_app(tmp_path, public_origin="https://fedsentry.example")
    with serve(app) as url:
        r = sign_in(url, key, REMOTE, origin="https://fedsentry.example")
    assert r.status_code == 303 and "; secure" in r.headers["set-cookie"].lower()
    (tmp_path / "b").mkdir()
    app, key = make_app(tmp_path / "b", public_origin="http://fedsentry.example")
    with serve(app) as url:
        r = sign_in(url, key, REMOTE, origin="http://fedsentry.example")
    assert r.status_code == 400 and "plain http://fedsentry.example" in r.text


def test_x_forwarded_proto_counts_only_from_a_proxy_uvicorn_trusts(tmp_path):
    """FedSentry reads no X-Forwarded-Proto itself; uvicorn (as `fedsentry serve` runs it) believes one only
    from 127.0.0.1, a TLS proxy on the same host."""
    app, key = make_app(tmp_path)
    forwarded = {"X-Forwarded-Proto": "https"}
    with serve(app, forwarded_allow_ips="192.0.2.1") as url:  # this client is not the trusted proxy
        r = sign_in(url, key, REMOTE, **forwarded)
    assert r.status_code == 400
    r = TestClient(app).post("/login", data={"key": key}, headers={"Host": REMOTE, **forwarded})
    assert r.status_code == 400
    with serve(app) as url:  # uvicorn's default: the proxy on 127.0.0.1 is trusted
        r = sign_in(url, key, REMOTE, origin=f"https://{REMOTE}", **forwarded)
    assert r.status_code == 303 and "; secure" in r.headers["set-cookie"].lower()


def test_the_advice_names_a_flag_and_a_setting_that_exist(monkeypatch):
    from fedsentry.cli import build_parser

    assert build_parser().parse_args(["serve", "--insecure-cookie"]).insecure_cookie
    monkeypatch.setenv("FEDSENTRY_PUBLIC_ORIGIN", "https://fedsentry.example")
    assert Settings().public_origin == "https://fedsentry.example"
