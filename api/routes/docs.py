"""The interactive API docs (/docs, /redoc): FastAPI's pages, which load Swagger UI or ReDoc from a CDN,
served with a Content-Security-Policy that allows that CDN and their own inline script, by hash."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)
CDN = "https://cdn.jsdelivr.net"
_INLINE = re.compile(r"<script>(.*?)</script>", re.S)


def _with_csp(page: HTMLResponse) -> HTMLResponse:
    html = bytes(page.body).decode()
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in _INLINE.findall(html))
    page.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src {CDN} {hashes}; style-src {CDN} https://fonts.googleapis.com "
        f"'unsafe-inline'; font-src https://fonts.gstatic.com; img-src 'self' data: https:; connect-src 'self'; "
        f"worker-src blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return page


@router.get("/docs")
def swagger(request: Request) -> HTMLResponse:
    return _with_csp(get_swagger_ui_html(openapi_url=request.app.openapi_url, title=f"{request.app.title} API"))


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    return _with_csp(get_redoc_html(openapi_url=request.app.openapi_url, title=f"{request.app.title} API"))
