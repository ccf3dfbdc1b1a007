"""Dependencies injected into routes: the database session and the caller's role.

Who is calling is settled once per request by `authenticate`: by the `AuthFirst` middleware before the body
is read (api/middleware.py), or here when a route is reached some other way."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.security import read_session, verify_key

COOKIE = "fedsentry_session"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# the bearer scheme, declared in the OpenAPI schema of every route that depends on `caller` (Swagger UI's
# Authorize button); it checks nothing itself: `authenticate` does, with its own messages, cookies included
BEARER = HTTPBearer(auto_error=False, scheme_name="APIKey",
                    description="An API key (`fedsentry apikey create --role admin|viewer`), sent as "
                                "`Authorization: Bearer <API key>`. Admin keys may change things; viewer keys read.")


def get_db(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as s:
        yield s


@dataclass
class Caller:
    key_id: str
    role: str
    name: str | None = None

    @property
    def who(self) -> str:
        """How acknowledgements name the caller: the key's name, else its id."""
        return self.name or self.key_id


def origin_parts(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL; None when it is not an http(s) one."""
    try:
        u = urlsplit(url.strip())
        port = u.port
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not u.hostname:
        return None
    return u.scheme, u.hostname.lower(), port or (443 if u.scheme == "https" else 80)


def own_origin(request: Request) -> str:
    """The dashboard's origin as browsers see it: the public_origin setting, else the request's own scheme (as
    the server saw it) and Host header."""
    return request.app.state.settings.public_origin or f"{request.url.scheme}://{request.headers.get('host', '')}"


def same_origin(request: Request) -> bool:
    """Whether a browser request comes from the dashboard's own origin (Origin, else Referer, header)."""
    sent = request.headers.get("origin") or request.headers.get("referer")
    if not sent:
        return False
    theirs = origin_parts(sent)
    return theirs is not None and theirs == origin_parts(own_origin(request))


def authenticate(request: Request, db: Session) -> Caller:
    """The bearer key, or the dashboard's session cookie (browsers cannot set headers on EventSource).

    A cookie comes with every request the browser makes to this host, whichever page asked: changes made
    with it must come from the dashboard's own origin. Bearer keys are sent deliberately and are exempt."""
    auth = request.headers.get("authorization", "")
    if auth:
        scheme, _, key = auth.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise HTTPException(401, "malformed Authorization header: expected 'Bearer <API key>'",
                                headers={"WWW-Authenticate": "Bearer"})
        row = verify_key(db, key.strip())
        if row is None:
            raise HTTPException(401, "unknown or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    elif COOKIE in request.cookies:
        row = read_session(db, request.cookies[COOKIE])
        if row is None:
            raise HTTPException(401, "session expired, signed out or revoked: sign in again at /login")
        if request.method in UNSAFE and not same_origin(request):
            raise HTTPException(403, "cross-site request refused: changes made with the dashboard's cookie must "
                                     "come from the dashboard's own pages (Origin header)")
    else:
        raise HTTPException(401, "missing API key: send 'Authorization: Bearer <API key>' or sign in at /login",
                            headers={"WWW-Authenticate": "Bearer"})
    return Caller(row.id, row.role, row.name)


def caller(request: Request, _: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> Caller:
    """Who calls: settled by the `AuthFirst` middleware, or here (the bearer parameter only declares the
    scheme in the OpenAPI schema)."""
    who = request.scope.get("state", {}).get("caller")
    if isinstance(who, Caller):
        return who
    with request.app.state.sessions() as db:
        return authenticate(request, db)


def admin(who: Caller = Depends(caller)) -> Caller:
    if who.role != "admin":
        raise HTTPException(403, f"this needs the admin role; key {who.key_id} has the {who.role} role")
    return who
