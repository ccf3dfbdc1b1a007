"""API keys (stored hashed) and the dashboard's signed session cookie."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from sqlalchemy import select

from coordinator.db import ApiKey, Secret

ROLES = ("admin", "viewer")
PREFIX = "fsk"


def _hash(secret: str) -> str:
    # keys are 256-bit random strings: a plain SHA-256 is enough (no dictionary to guard against)
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(session, role: str) -> str:
    """A new key `fsk_<id>_<secret>`; only its hash is stored, so it is shown once."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    session.add(ApiKey(id=key_id, hash=_hash(secret), role=role))
    return f"{PREFIX}_{key_id}_{secret}"


def verify_key(session, key: str) -> ApiKey | None:
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    row = session.get(ApiKey, parts[1])
    if row is None or row.revoked or not hmac.compare_digest(row.hash, _hash(parts[2])):
        return None
    return row


def signing_key(session) -> bytes:
    row = session.get(Secret, "session")
    if row is None:
        row = Secret(name="session", value=secrets.token_hex(32))
        session.add(row)
        session.flush()
    return bytes.fromhex(row.value)


def make_cookie(session, key_id: str, hours: float) -> str:
    expires = int(time.time() + hours * 3600)
    msg = f"{key_id}.{expires}"
    sig = hmac.new(signing_key(session), msg.encode(), hashlib.sha256).hexdigest()
    return f"{msg}.{sig}"


def read_cookie(session, value: str) -> ApiKey | None:
    try:
        key_id, expires, sig = value.split(".")
        if int(expires) < time.time():
            return None
    except ValueError:
        return None
    good = hmac.new(signing_key(session), f"{key_id}.{expires}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(good, sig):
        return None
    row = session.get(ApiKey, key_id)
    return None if row is None or row.revoked else row


def list_keys(session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created)))
