"""Dependencies injected into routes: the database session and the caller's role."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session

from api.security import read_cookie, verify_key

COOKIE = "fedsentry_session"


def get_db(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as s:
        yield s


@dataclass
class Caller:
    key_id: str
    role: str


def caller(request: Request, db: Session = Depends(get_db)) -> Caller:
    """The bearer key, or the dashboard's session cookie (browsers cannot set headers on EventSource)."""
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
        row = read_cookie(db, request.cookies[COOKIE])
        if row is None:
            raise HTTPException(401, "session expired or revoked: sign in again at /login")
        db.commit()
    else:
        raise HTTPException(401, "missing API key: send 'Authorization: Bearer <API key>' or sign in at /login",
                            headers={"WWW-Authenticate": "Bearer"})
    return Caller(row.id, row.role)


def admin(who: Caller = Depends(caller)) -> Caller:
    if who.role != "admin":
        raise HTTPException(403, f"this needs the admin role; key {who.key_id} has the {who.role} role")
    return who
