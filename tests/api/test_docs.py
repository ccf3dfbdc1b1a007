"""The API docs (/docs, /redoc) are served whole by this server, so they work without internet access, and
the OpenAPI schema declares the bearer key so that Swagger UI offers to authorise (the browser test,
tests/api/test_docs_browser.py, clicks through both)."""

from __future__ import annotations

import re

import pytest

from api.routes.docs import REDOC_LOGO
from tests.api.conftest import bearer

# what a docs page's CSP may name: this server, nothing, hashes of its inline scripts, and (style only)
# inline styles; data: images and blob: workers are made by the page itself
OWN = re.compile(r"^('self'|'none'|'sha256-[A-Za-z0-9+/=]+'|data:|blob:|'unsafe-inline')$")


def _csp(header: str) -> dict[str, list[str]]:
    return {d.split()[0]: d.split()[1:] for d in (p.strip() for p in header.split(";")) if d}


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_everything_from_this_server(client, page):
    r = client.get(page)
    assert r.status_code == 200
    html = r.text
    assert "http://" not in html and "https://" not in html
    urls = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
    urls += re.findall(r'spec-url="([^"]+)"', html)
    assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    for u in urls:
        asset = client.get(u)
        assert asset.status_code == 200 and len(asset.content) > 1000, u
    csp = _csp(r.headers["content-security-policy"])
    assert csp["default-src"] == ["'none'"] and csp["connect-src"] == ["'self'"]
    sources = [s for values in csp.values() for s in values]
    assert all(OWN.match(s) for s in sources), r.headers["content-security-policy"]
    assert "'unsafe-inline'" not in csp["script-src"] and "'unsafe-eval'" not in csp["script-src"]
    if page == "/docs":
        assert any(s.startswith("'sha256-") for s in csp["script-src"])  # its one inline script, by hash


def test_docs_assets_are_the_packaged_files_and_may_be_cached(client):
    from importlib.resources import files

    for name, media in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "text/css"),
                        ("redoc.standalone.js", "javascript"), ("favicon.png", "image/png")):
        r = client.get(f"/docs-assets/{name}")
        assert r.status_code == 200 and media in r.headers["content-type"], name
        packaged = (files("fastapi_offline") / "static" / name).read_bytes()
        if name == "redoc.standalone.js":  # the one image it loads from the internet, made an empty one
            assert packaged.count(REDOC_LOGO) == 1 and REDOC_LOGO not in r.content
            packaged = packaged.replace(REDOC_LOGO, b"data:,")
        assert r.content == packaged, name
        assert "no-store" not in r.headers.get("cache-control", "")
    assert client.get("/docs-assets/../deps.py").status_code == 404


def test_the_schema_declares_the_bearer_key_on_every_route_that_needs_one(client, keys):
    schema = client.get("/openapi.json").json()
    (name, scheme), = schema["components"]["securitySchemes"].items()
    assert name == "APIKey" and scheme["type"] == "http" and scheme["scheme"] == "bearer"
    assert "Authorization: Bearer <API key>" in scheme["description"]
    operations = [(path, method, op) for path, ops in schema["paths"].items() for method, op in ops.items()]
    api = [(p, m) for p, m, op in operations if p.startswith("/api/v1/")]
    assert len(api) >= 20
    for path, method, op in operations:
        needs_key = path != "/healthz"
        assert (op.get("security") == [{"APIKey": []}]) == needs_key, (method, path)
    # declaring the scheme changed nothing in how keys are checked: the same answers as before
    assert client.get("/healthz").status_code == 200
    r = client.get("/api/v1/devices")
    assert r.status_code == 401 and r.json()["detail"].startswith("missing API key")
    assert r.headers["www-authenticate"] == "Bearer"
    r = client.get("/api/v1/devices", headers={"Authorization": "Basic abc"})
    assert r.json()["detail"] == "malformed Authorization header: expected 'Bearer <API key>'"
    r = client.get("/api/v1/devices", headers={"Authorization": "Bearer"})
    assert r.status_code == 401 and r.json()["detail"].startswith("malformed Authorization header")
    assert client.get("/api/v1/devices", headers=bearer(keys["viewer"])).status_code == 200


def test_the_favicon_browsers_ask_for_is_served(client):
    r = client.get("/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png" and r.content[:4] == b"\x89PNG"
