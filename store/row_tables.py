"""Server arrays that grow with the federation (`FederatedAlgorithm.row_tables`), stored in fixed chunks.

A round changes a few rows (`FederatedAlgorithm.touched`); only the chunks holding them are written, so
what the coordinator writes per round follows the sampled clients, not the size of the federation. The
arrays' shapes go with the job's resumable state (`describe`), their chunks into `server_chunks`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from store.db import ServerChunk

CHUNK_BYTES = 1 << 13


def chunk_rows(arr: np.ndarray) -> int:
    """Rows per stored chunk of a row table: about CHUNK_BYTES."""
    row = max(arr[:1].nbytes if len(arr) else arr.itemsize, 1)
    return max(1, CHUNK_BYTES // row)


def dirty_chunks(arr: np.ndarray, rows: np.ndarray | None) -> list[tuple[int, bytes]]:
    """(chunk number, raw bytes) of the chunks holding `rows` (all chunks when rows is None)."""
    per = chunk_rows(arr)
    chunks = range(-(-len(arr) // per)) if rows is None else np.unique(np.asarray(rows, dtype=np.int64) // per)
    return [(int(c), np.ascontiguousarray(arr[int(c) * per:(int(c) + 1) * per]).tobytes()) for c in chunks]


def changed(server: Mapping[str, np.ndarray], tables: list[str], touched: Mapping[str, np.ndarray] | None,
            lengths: Mapping[str, int] | None = None) -> list[tuple[str, int, bytes]]:
    """(array, chunk, bytes) to write for these row tables: all chunks in use when touched is None (the first
    save), otherwise the chunks of the touched rows. `lengths`: the rows in use of tables allocated beyond."""
    empty = np.zeros(0, dtype=np.int64)
    lengths = lengths or {}
    return [(k, c, data) for k in tables
            for c, data in dirty_chunks(server[k][: lengths.get(k, len(server[k]))],
                                        None if touched is None else touched.get(k, empty))]


def describe(server: Mapping[str, np.ndarray], tables: list[str],
             lengths: Mapping[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """What rebuilding the tables needs besides their chunks: length in use, dtype and row shape."""
    lengths = lengths or {}
    return {k: {"length": lengths.get(k, len(server[k])), "dtype": server[k].dtype.str,
                "row": list(server[k].shape[1:])} for k in tables}


def store(session: Session, job_id: str, chunks: list[tuple[str, int, bytes]]) -> None:
    for array, chunk, data in chunks:
        session.merge(ServerChunk(job_id=job_id, array=array, chunk=chunk, data=data))


def load(session: Session, job_id: str, shapes: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """The row tables as stored (rows never written are zeros, as they were when created)."""
    out = {}
    for k, meta in shapes.items():
        arr = np.zeros((meta["length"], *meta["row"]), dtype=np.dtype(meta["dtype"]))
        per = chunk_rows(arr)
        flat = arr.reshape(len(arr), -1)
        for c in session.scalars(select(ServerChunk).where(ServerChunk.job_id == job_id, ServerChunk.array == k)):
            rows = np.frombuffer(c.data, dtype=arr.dtype).reshape(-1, flat.shape[1])
            flat[c.chunk * per: c.chunk * per + len(rows)] = rows
        out[k] = arr
    return out
