"""Work that one process of many must do alone (issue 27, points 3 and 4): leading each job, forwarding to each
destination, retention and publishing promoted models. Two coordinators on one database sent every alert to a
webhook twice, and one restarted under the same client id as a live one led the live one's jobs beside it.

`Locks` holds a process's PostgreSQL session-level advisory locks (`pg_try_advisory_lock`) on one connection of
its own, kept open while any is held. The process that holds a name's lock does its work; the others ask again
every `recheck` seconds and take over as soon as the holder lets go or ends (its connection closes, so do its
locks: a killed process holds nothing). A holder checks its connection every `recheck` seconds, and when it is
gone knows at once that it holds nothing any more.

SQLite: a database file serves one coordinator at a time (the deployment documents it), so every lock is held.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

log = logging.getLogger("fedsentry.singleton")


def lock_key(name: str) -> int:
    """The bigint advisory-lock key of a name."""
    return int.from_bytes(hashlib.sha256(f"fedsentry:{name}".encode()).digest()[:8], "big", signed=True)


class Locks:
    def __init__(self, engine: Engine, recheck: float = 2.0):
        self.engine, self.recheck = engine, recheck
        self._conn: Connection | None = None
        self._held: dict[int, str] = {}
        self._asked: dict[int, float] = {}
        self._checked = -math.inf
        self._mutex = threading.Lock()  # forwarding threads and the coordinator's worker share the connection

    @property
    def shared(self) -> bool:
        """Whether other processes may use this database (PostgreSQL), so that the locks mean anything."""
        return self.engine.dialect.name == "postgresql"

    def held(self, name: str) -> bool:
        """Whether this process may do `name`'s work now: it holds the lock, taking it if it is free (asked at
        most every `recheck` seconds)."""
        if not self.shared:
            return True
        key = lock_key(name)
        with self._mutex:
            now = time.monotonic()
            if key in self._held:
                if now - self._checked >= self.recheck:
                    self._checked = now
                    self._query("SELECT 1")  # the connection, and so every lock on it, is still there
                return key in self._held
            if now - self._asked.get(key, -math.inf) < self.recheck:
                return False
            self._asked[key] = now
            if self._query("SELECT pg_try_advisory_lock(:k)", k=key):
                self._held[key] = name
                log.info("this process now does: %s", name)
                return True
            return False

    def release(self, name: str) -> None:
        """Let another process take `name`'s work over now."""
        key = lock_key(name)
        with self._mutex:
            if self._held.pop(key, None) is not None:
                self._query("SELECT pg_advisory_unlock(:k)", k=key)
                self._asked.pop(key, None)

    def close(self) -> None:
        """Release every lock (the connection goes: its session's locks with it)."""
        with self._mutex:
            self._held.clear()
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None

    def _query(self, sql: str, **params: Any) -> Any:
        """One statement on the locks' connection, committed (a session's locks outlive its transactions); None
        when the database is gone, which drops every lock."""
        try:
            if self._conn is None:
                self._conn = self.engine.connect()
            value = self._conn.execute(text(sql), params).scalar()
            self._conn.commit()
            return value
        except Exception as e:
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            log.warning("lost the database (%s): holding none of %s any more", first,
                        ", ".join(sorted(self._held.values())) or "no lock")
            conn: Any = self._conn
            self._conn, self._held = None, {}
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.invalidate()  # never back to the pool: its session may still hold locks
            return None
