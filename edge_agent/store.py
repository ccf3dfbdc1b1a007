"""What an agent keeps on disk so that a restart loses nothing: files written atomically."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import threading
import time
import zipfile
from collections.abc import Iterator
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

    def array_rows(self, name: str, key: str) -> int | None:
        """The number of rows of one array of a saved .npz (from its header: nothing else is read); None when
        the file or the array is not there."""
        try:
            with zipfile.ZipFile(self.folder / f"{name}.npz") as z, z.open(f"{key}.npy") as f:
                shape, _, _ = _npy_header(f)
        except (FileNotFoundError, KeyError):
            return None
        return int(shape[0]) if shape else None

    def read_rows(self, name: str, key: str, block: int) -> Iterator[np.ndarray]:
        """The rows of one array of a saved .npz, `block` rows at a time, read from the file as they are wanted:
        a pass over an agent's training records holds one block of them, never all of them (np.load reads the
        whole array). Nothing when the file or the array is not there."""
        try:
            z = zipfile.ZipFile(self.folder / f"{name}.npz")
        except FileNotFoundError:
            return
        with z:
            try:
                f = z.open(f"{key}.npy")
            except KeyError:
                return
            with f:
                shape, fortran, dtype = _npy_header(f)
                if fortran or dtype.hasobject or not shape:  # not the row-major records np.save writes: whole
                    whole = self.load_arrays(name)
                    a = np.atleast_1d(whole[key]) if whole else np.zeros(0)
                    yield from (a[i: i + block] for i in range(0, len(a), block))
                    return
                row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
                for start in range(0, shape[0], block):
                    n = min(block, shape[0] - start)
                    data = f.read(n * row)
                    if len(data) != n * row:
                        raise ValueError(f"{name}.npz: {key} is shorter than its header says")
                    yield np.frombuffer(data, dtype=dtype).reshape((n, *shape[1:]))  # read-only: a view of the bytes

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


def _npy_header(f: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of the .npy file open at its start, leaving it at the data."""
    with _NPZ_LOCK:  # the header is read with ast.literal_eval (see _NPZ_LOCK)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        return np.lib.format.read_array_header_2_0(f)


#: the outbox's SQLite page cache (KiB)
OUTBOX_CACHE_KIB = 256


class Outbox:
    """Alerts waiting for the coordinator's confirmation that it stored them, in SQLite so they survive
    restarts and outages, and beside them the agent's reading state (the position in a followed log, the
    rate limiter's counts): written in one transaction with the alerts a batch raised, so a record is
    acknowledged (the position moves past it) exactly when its alerts are safe."""

    def __init__(self, path: str | os.PathLike):
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        # a small page cache: the outbox is read and written in order, and incident updates that carry their
        # records made SQLite's default 2 MiB cache fill up on a device (bench agent-memory)
        self.db.execute(f"PRAGMA cache_size = -{OUTBOX_CACHE_KIB}")
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

    def due(self, older_than: float, limit: int = 1000, max_bytes: int = 1 << 20) -> list[tuple[str, bytes]]:
        """Alerts not sent since `older_than` (a time.time()), oldest first: at most `limit`, and no more than
        about `max_bytes` of payload (a pass over a large outbox never holds it all)."""
        out, size = [], 0
        for i, payload in self.db.execute("SELECT id, payload FROM outbox WHERE sent <= ? ORDER BY created LIMIT ?",
                                          (older_than, limit)):
            out.append((i, payload))
            size += len(payload)
            if size >= max_bytes:
                break
        return out

    def sent(self, *alert_ids: str) -> None:
        now = time.time()
        self.db.executemany("UPDATE outbox SET sent = ? WHERE id = ?", [(now, i) for i in alert_ids])

    def done(self, *alert_ids: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in alert_ids])

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
