"""What an agent keeps on disk so that a restart loses nothing: files written atomically."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

#: np.load reads each array's header with ast.literal_eval, and CPython 3.11's AST constructor is not safe across
#: threads ("SystemError: AST constructor recursion depth mismatch", seen with agents run as threads of one
#: process, as the test fleets and embedded agents are): one load at a time per process
_NPZ_LOCK = threading.Lock()


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class AgentStore:
    """A folder holding the agent's JSON metadata, numpy state per job, and cached messages."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def load_json(self, name: str, default: Any) -> Any:
        p = self.folder / f"{name}.json"
        return json.loads(p.read_text()) if p.exists() else default

    def save_json(self, name: str, value: Any) -> None:
        atomic_write(self.folder / f"{name}.json", json.dumps(value).encode())

    def load_arrays(self, name: str) -> dict[str, np.ndarray] | None:
        p = self.folder / f"{name}.npz"
        if not p.exists():
            return None
        with _NPZ_LOCK, np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def save_arrays(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        buf = io.BytesIO()
        named: dict[str, Any] = dict(arrays)
        np.savez(buf, **named)
        atomic_write(self.folder / f"{name}.npz", buf.getvalue())

    def load_bytes(self, name: str) -> bytes | None:
        p = self.folder / name
        return p.read_bytes() if p.exists() else None

    def save_bytes(self, name: str, data: bytes) -> None:
        atomic_write(self.folder / name, data)


class Outbox:
    """Alerts waiting for the coordinator's confirmation that it stored them, in SQLite so they survive
    restarts and outages, and beside them the agent's reading state (the position in a followed log, the
    rate limiter's counts): written in one transaction with the alerts a batch raised, so a record is
    acknowledged (the position moves past it) exactly when its alerts are safe."""

    def __init__(self, path: str | os.PathLike):
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS outbox (id TEXT PRIMARY KEY, created REAL, payload BLOB, "
                        "sent REAL NOT NULL DEFAULT 0)")
        self.db.execute("CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, value TEXT)")
        if "sent" not in [r[1] for r in self.db.execute("PRAGMA table_info(outbox)")]:  # an older outbox
            self.db.execute("ALTER TABLE outbox ADD COLUMN sent REAL NOT NULL DEFAULT 0")

    def add(self, *items: tuple[str, bytes], state: dict[str, Any] | None = None) -> None:
        """(alert id, payload) pairs and named state values, in one transaction."""
        now = time.time()
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR IGNORE INTO outbox (id, created, payload) VALUES (?, ?, ?)",
                                [(i, now, p) for i, p in items])
            self.db.executemany("INSERT OR REPLACE INTO state VALUES (?, ?)",
                                [(k, json.dumps(v)) for k, v in (state or {}).items()])

    def load_state(self, name: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM state WHERE name = ?", (name,)).fetchone()
        return default if row is None else json.loads(row[0])

    def due(self, older_than: float, limit: int = 1000) -> list[tuple[str, bytes]]:
        """Alerts not sent since `older_than` (a time.time()), oldest first."""
        return list(self.db.execute("SELECT id, payload FROM outbox WHERE sent <= ? ORDER BY created LIMIT ?",
                                    (older_than, limit)))

    def sent(self, *alert_ids: str) -> None:
        now = time.time()
        self.db.executemany("UPDATE outbox SET sent = ? WHERE id = ?", [(now, i) for i in alert_ids])

    def done(self, *alert_ids: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in alert_ids])

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
