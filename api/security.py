"""API keys (stored hashed) and the dashboard's sessions (random tokens, stored hashed, ended on sign-out)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from sqlalchemy import delete, select

from store.db import ApiKey, DashboardSession, utcnow

ROLES = ("admin", "viewer")
PREFIX = "fsk"
# fsk_<12 hex>_<43 url-safe base64>: anything else is refused before the database is asked
KEY_RE = re.compile(rf"{PREFIX}_([0-9a-f]{{12}})_([A-Za-z0-9_-]{{43}})")
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{43}")


def _hash(secret: str) -> str:
    # keys and session tokens are 256-bit random strings: a plain SHA-256 is enough (no dictionary to guard against)
    return hashlib.sha256(secret.encode()).hexdigest()


NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.@+-]{0,63}")


def create_key(session, role: str, name: str | None = None) -> str:
    """A new key `fsk_<id>_<secret>`; only its hash is stored, so it is shown once. `name` says who holds it
    (acknowledgements record it)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    if name is not None and not NAME_RE.fullmatch(name):
        raise ValueError("name must be 1-64 letters, digits, spaces or _.@+- (starting with a letter or digit)")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    session.add(ApiKey(id=key_id, hash=_hash(secret), role=role, name=name))
    return f"{PREFIX}_{key_id}_{secret}"


def verify_key(session, key: str) -> ApiKey | None:
    m = KEY_RE.fullmatch(key)
    if m is None:
        return None
    row = session.get(ApiKey, m.group(1))
    if row is None or row.revoked or not hmac.compare_digest(row.hash, _hash(m.group(2))):
        return None
    return row


def start_session(session, key_id: str, hours: float) -> str:
    """A new dashboard session for the key; returns the cookie's token (only its hash is stored)."""
    now = utcnow()
    session.execute(delete(DashboardSession).where(DashboardSession.expires < now))
    token = secrets.token_urlsafe(32)
    session.add(DashboardSession(id=_hash(token), key_id=key_id, created=now, expires=now + timedelta(hours=hours)))
    return token


def read_session(session, token: str) -> ApiKey | None:
    """The key a live session belongs to: None when unknown, signed out, expired or its key revoked."""
    if not TOKEN_RE.fullmatch(token):
        return None
    row = session.get(DashboardSession, _hash(token))
    if row is None or row.expires < utcnow():
        return None
    key = session.get(ApiKey, row.key_id)
    return None if key is None or key.revoked else key


def end_session(session, token: str) -> None:
    if TOKEN_RE.fullmatch(token):
        session.execute(delete(DashboardSession).where(DashboardSession.id == _hash(token)))


def list_keys(session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created)))
