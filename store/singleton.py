"""Work that one process of many must do alone (issue 27, point 4): forwarding to each destination, retention and
publishing promoted models. Two coordinators on one database sent every alert to a webhook twice.

A `Singleton` is a PostgreSQL session-level advisory lock (`pg_try_advisory_lock`) on a connection of its own,
kept open while it is held: the process that holds it does the work, the others ask again now and then and take
over within `recheck` seconds of the holder's end (its connection closes, so does its lock: a killed process
holds nothing). A holder checks its connection every `recheck` seconds and stops at once when it is gone.

SQLite: a database file serves one coordinator at a time (the deployment documents it), so the lock is always
held there.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

log = logging.getLogger("fedsentry.singleton")


class Singleton:
    def __init__(self, engine: Engine, name: str, recheck: float = 2.0):
        self.engine, self.name, self.recheck = engine, name, recheck
        digest = hashlib.sha256(f"fedsentry:{name}".encode()).digest()
        self.key = int.from_bytes(digest[:8], "big", signed=True)  # PostgreSQL's bigint lock key
        self._conn: Connection | None = None
        self._asked = -math.inf

    @property
    def shared(self) -> bool:
        """Whether other processes may use this database (PostgreSQL) and the lock means anything."""
        return self.engine.dialect.name == "postgresql"

    def held(self) -> bool:
        """Whether this process may do the work now: it holds the lock (taking it if it is free)."""
        if not self.shared:
            return True
        now = time.monotonic()
        if now - self._asked < self.recheck:
            return self._conn is not None
        self._asked = now
        try:
            if self._conn is not None:
                self._conn.execute(text("SELECT 1")).scalar()  # the connection, and so the lock, is still there
                self._conn.commit()
                return True
            conn = self.engine.connect()
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar())
            conn.commit()  # the lock is the session's: it outlives the transaction
            if not got:
                conn.close()
                return False
            self._conn = conn
            log.info("this process now does %s", self.name)
            return True
        except Exception as e:  # the database gone: the lock with it
            log.warning("%s: lost the database (%s); another process may take it over", self.name,
                        str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__)
            self._drop()
            return False

    def release(self) -> None:
        """Let another process take the work over now."""
        if self._conn is None:
            return
        try:
            self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
            self._conn.commit()
            self._conn.close()
        except Exception:
            self._drop()
        self._conn = None

    def _drop(self) -> None:
        conn: Any = self._conn
        self._conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.invalidate()  # never back to the pool: its session may still hold the lock
