"""Pure ASGI middleware, outermost first: security headers on every response; a request-body size limit
(413 before any route or key check reads a byte too many); the caller's key or session checked before the
body is read, so unauthenticated uploads cost nothing."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import HTTPException
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import authenticate

# the dashboard loads its script, style sheet and SVG charts from this server, nothing inline, nothing else
DASHBOARD_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
                 "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": DASHBOARD_CSP, "X-Content-Type-Options": "nosniff",
           "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin"}
PROTECTED = ("/api/", "/metrics", "/charts/")  # every route under these needs a key or a session
STATIC = ("/static/", "/docs-assets/")  # files that may be cached (every other answer is no-store)


class SecurityHeaders:
    """CSP, nosniff, no framing, same-origin referrers on every response (a route may set its own CSP);
    no-store on everything but static files (the dashboard's and the API docs'); Strict-Transport-Security
    when served over HTTPS."""

    def __init__(self, app: ASGIApp, https: bool) -> None:
        self.app, self.https = app, https

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        static = scope["path"].startswith(STATIC)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
                if not static:
                    headers["Cache-Control"] = "no-store"
                if self.https or scope.get("scheme") == "https":
                    headers["Strict-Transport-Security"] = "max-age=31536000; includeSubDomains"
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes: send less (the limit is the "
                              f"FEDSENTRY_MAX_BODY_BYTES setting)")


class BodyLimit:
    """413 for a declared Content-Length over the limit, at once; a chunked body is counted as it is read
    and refused as soon as it passes the limit, before the route runs."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                return await _reply(scope, receive, send, 400, "malformed Content-Length header")
            if int(declared) > self.max_bytes:
                return await _reply(scope, receive, send, 413, BodyTooLarge(self.max_bytes).detail)
        seen, started = 0, False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge as e:  # read outside a route (routes answer 413 themselves)
            if started:
                raise
            await _reply(scope, receive, send, 413, e.detail)


class AuthFirst:
    """Settle the caller of a protected route before anything reads the request body; the routes'
    `caller` dependency then finds it in the request state."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED):
            return await self.app(scope, receive, send)
        request = Request(scope)

        def check():
            with request.app.state.sessions() as db:
                return authenticate(request, db)

        try:
            who = await run_in_threadpool(check)
        except HTTPException as e:
            return await _reply(scope, receive, send, e.status_code, e.detail, e.headers)
        scope.setdefault("state", {})["caller"] = who
        await self.app(scope, receive, send)


async def _reply(scope: Scope, receive: Receive, send: Send, status: int, detail: str,
                 headers: Mapping[str, str] | None = None) -> None:
    await JSONResponse({"detail": detail}, status_code=status, headers=headers)(scope, receive, send)
