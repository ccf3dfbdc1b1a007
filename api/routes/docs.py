"""The interactive API docs (/docs, /redoc): Swagger UI and ReDoc served by this server, from the files the
fastapi-offline package ships (mounted at /docs-assets), so they work on a network without internet access.
Their Content-Security-Policy allows this server only, and the pages' own inline script by its hash.

ReDoc's bundle has one address on the internet it loads: the Redocly logo in its side bar. It is served with
that address made an empty image, which ReDoc hides; the CSP would block it anyway, but with a violation."""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

router = APIRouter(include_in_schema=False)
ASSETS = "/docs-assets"  # swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png
_INLINE = re.compile(r"<script>(.*?)</script>", re.S)


REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"


class _Assets(StaticFiles):
    """The package's files as they are, but ReDoc's bundle without its internet address."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        if path == "redoc.standalone.js" and scope["method"] in ("GET", "HEAD"):
            return Response(_redoc_js(), media_type="text/javascript")
        return await super().get_response(path, scope)


@cache
def _redoc_js() -> bytes:
    return (files("fastapi_offline") / "static" / "redoc.standalone.js").read_bytes().replace(REDOC_LOGO, b"data:,")


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response:
    """The icon browsers ask every site for (the API docs' own, from the same package): not a 404 in the logs."""
    icon = (files("fastapi_offline") / "static" / "favicon.png").read_bytes()
    return Response(icon, media_type="image/png", headers={"Cache-Control": "public, max-age=86400"})


def assets() -> StaticFiles:
    """The Swagger UI and ReDoc files of the fastapi-offline package, to mount at ASSETS."""
    return _Assets(packages=[("fastapi_offline", "static")])


def _with_csp(page: HTMLResponse) -> HTMLResponse:
    """Only this server's files; inline scripts by hash; inline styles (ReDoc writes its own <style> tags);
    data: images (Swagger UI's icons); ReDoc's search runs in a blob: worker."""
    html = bytes(page.body).decode()
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in _INLINE.findall(html))
    page.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        f"img-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; base-uri 'none'; form-action 'none'; "
        f"frame-ancestors 'none'")
    return page


def _title(request: Request) -> str:
    return f"{request.app.title} API"


@router.get("/docs")
def swagger(request: Request) -> HTMLResponse:
    return _with_csp(get_swagger_ui_html(
        openapi_url=request.app.openapi_url, title=_title(request), swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css", swagger_favicon_url=f"{ASSETS}/favicon.png"))


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    return _with_csp(get_redoc_html(
        openapi_url=request.app.openapi_url, title=_title(request), redoc_js_url=f"{ASSETS}/redoc.standalone.js",
        redoc_favicon_url=f"{ASSETS}/favicon.png", with_google_fonts=False))
