"""Over a real server: request bodies over the limit get 413 before any route or key check reads them,
unauthenticated requests are refused before their body is read, and every response carries the
security headers."""

from __future__ import annotations

import socket

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from store.db import Job
from tests.api.conftest import bearer, populate, serve

LIMIT = 64 * 1024


@pytest.fixture
def small(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db", cookie_secure=False, max_body_bytes=LIMIT))
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    return app, key


def raw_request(url: str, head: str, body_chunks=(), timeout: float = 5) -> tuple[int, str]:
    """Send the request head (and chunks, as far as the server takes them); the status line and body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head.encode())
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and hung up: read the answer
        data = b""
        try:
            while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                part = sock.recv(65536)
                if not part:
                    break
                data += part
        except ConnectionResetError:
            pass
    text = data.decode(errors="replace")
    return int(text.split(" ", 2)[1]), text


def head(method: str, path: str, headers: dict[str, str]) -> str:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return "\r\n".join(lines) + "\r\n\r\n"


def chunked(total: int, size: int = 16 * 1024):
    sent = 0
    while sent < total:
        yield f"{size:x}\r\n".encode() + b" " * size + b"\r\n"
        sent += size
    yield b"0\r\n\r\n"


def test_a_declared_oversized_body_is_413_without_being_sent(small):
    app, key = small
    with serve(app) as url:
        for path, auth in (("/api/v1/jobs", bearer(key)), ("/api/v1/jobs", {}), ("/login", {})):
            status, text = raw_request(url, head("POST", path, {**auth, "Content-Type": "application/json",
                                                              "Content-Length": str(96 << 20)}))
            assert status == 413 and "larger than 65536 bytes" in text, text


def test_an_unauthenticated_body_is_never_read(small):
    app, _ = small
    with serve(app) as url:  # the body is announced but never sent: the answer cannot have waited for it
        status, text = raw_request(url, head("POST", "/api/v1/jobs", {"Content-Type": "application/json",
                                                                      "Content-Length": str(LIMIT)}))
        assert status == 401 and "missing API key" in text
        status, _ = raw_request(url, head("POST", "/api/v1/jobs", {**bearer("fsk_000000000000_" + "x" * 43),
                                                                   "Content-Length": str(LIMIT)}))
        assert status == 401


def test_a_chunked_body_is_counted_and_cut_off(small):
    app, key = small
    hdrs = {**bearer(key), "Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    with serve(app) as url:
        status, text = raw_request(url, head("POST", "/api/v1/jobs", hdrs), chunked(4 * LIMIT))
        assert status == 413 and "larger than" in text, text
        status, _ = raw_request(url, head("POST", "/api/v1/jobs", {k: v for k, v in hdrs.items()
                                                                   if k != "Authorization"}), chunked(4 * LIMIT))
        assert status == 401
        status, _ = raw_request(url, head("POST", "/login", {"Transfer-Encoding": "chunked",
                                                             "Content-Type": "application/x-www-form-urlencoded"}),
                                chunked(4 * LIMIT))
        assert status == 413
    with app.state.sessions() as s:
        assert s.query(Job).count() == 0


def test_bodies_under_the_limit_still_work(small):
    app, key = small
    client = TestClient(app)
    features = [f"feature-{i}" for i in range(900)]
    r = client.post("/api/v1/jobs", json={"features": features, "rank": 2}, headers=bearer(key))
    assert r.status_code == 201, r.text
    r = client.post("/api/v1/jobs", json={"features": features * 6, "rank": 2}, headers=bearer(key))
    assert r.status_code == 413  # TestClient sends a Content-Length
    assert client.post("/api/v1/jobs", content=b"{", headers={**bearer(key), "Content-Length": "x"}).status_code == 400


STRICT = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
          "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


@pytest.mark.parametrize("secure", [False, True])
def test_security_headers_on_every_response(tmp_path, secure):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db", cookie_secure=secure, max_body_bytes=1000))
    populate(app, n_alerts=1)
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    client = TestClient(app)
    answers = {
        "login": client.get("/login"), "dashboard redirect": client.get("/", follow_redirects=False),
        "api": client.get("/api/v1/jobs", headers=bearer(key)), "401": client.get("/api/v1/jobs"),
        "404": client.get("/api/v1/jobs/nope", headers=bearer(key)), "healthz": client.get("/healthz"),
        "422": client.get("/api/v1/jobs", params={"limit": 0}, headers=bearer(key)),
        "413": client.post("/api/v1/jobs", content=b"x" * 2000, headers=bearer(key)),
        "static": client.get("/static/app.js"), "openapi": client.get("/openapi.json"),
        "docs": client.get("/docs"), "redoc": client.get("/redoc"),
        "docs asset": client.get("/docs-assets/swagger-ui.css"),
        "chart": client.get("/charts/jobs/job-1/convergence.svg", headers=bearer(key)),
        "metrics": client.get("/metrics", headers=bearer(key)),
    }
    for name, r in answers.items():
        h = r.headers
        assert h["x-content-type-options"] == "nosniff" and h["x-frame-options"] == "DENY", name
        assert h["referrer-policy"] == "same-origin", name
        assert "frame-ancestors 'none'" in h["content-security-policy"], name
        assert ("strict-transport-security" in h) == secure, name
        assert (h.get("cache-control") == "no-store") == (name not in ("static", "docs asset")), name
    for name in ("login", "api", "401", "dashboard redirect", "static"):
        assert answers[name].headers["content-security-policy"] == STRICT, name
    chart = answers["chart"].headers["content-security-policy"]
    assert "script-src" not in chart and chart.startswith("default-src 'none'")
    docs = answers["docs"].headers["content-security-policy"]
    assert "'unsafe-inline'" not in docs.split("script-src")[1].split(";")[0] and "'sha256-" in docs


def test_the_dashboard_page_has_no_inline_script(app, keys):
    client = TestClient(app)
    client.post("/login", data={"key": keys["viewer"]}, headers={"Origin": "http://testserver"})
    page = client.get("/").text
    assert 'data-role="viewer"' in page and "<script>" not in page and " style=" not in page
    assert "<script>" not in client.get("/login").text
