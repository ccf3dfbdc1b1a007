"""Where an agent's traffic comes from: a CSV replayed at a rate, JSON lines on stdin, or a Zeek
conn.log (TSV or JSON) followed as it grows, across rotation. Every source yields batches of named
columns; ``select`` maps them by name onto a model's feature schema.

Zeek's conn.log names the originator and responder ``orig_*`` and ``resp_*``; the model uses TON-IoT's
``src_*`` and ``dst_*``. ZEEK_FIELDS is the mapping; ``proto`` becomes the indicators ``proto_tcp`` and
``proto_udp``; ``conn_state`` becomes ``conn_rejected`` (1 for REJ, S0, RSTOS0, RSTRH, SH, SHR). Zeek's
unset value ``-`` reads as 0.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ZEEK_FIELDS = {
    "duration": "duration", "orig_bytes": "src_bytes", "resp_bytes": "dst_bytes", "missed_bytes": "missed_bytes",
    "orig_pkts": "src_pkts", "orig_ip_bytes": "src_ip_bytes", "resp_pkts": "dst_pkts",
    "resp_ip_bytes": "dst_ip_bytes",
}
REJECTED_STATES = {"REJ", "S0", "RSTOS0", "RSTRH", "SH", "SHR"}


@dataclass
class Batch:
    columns: list[str]
    X: np.ndarray  # (n, len(columns)) float
    labels: np.ndarray | None = None  # only for evaluation in the demo; never reaches the model


class SchemaError(ValueError):
    """Input that cannot supply the model's features."""


def select(batch: Batch, features: list[str]) -> np.ndarray:
    """The batch's columns in the order of the model's features; refuse if any is missing."""
    index = {c: j for j, c in enumerate(batch.columns)}
    missing = [f for f in features if f not in index]
    if missing:
        raise SchemaError(f"input lacks the model's features: {', '.join(missing)}")
    return batch.X[:, [index[f] for f in features]]


def _to_float(v: object) -> float:
    if v in ("-", "", None):
        return 0.0
    if isinstance(v, str | int | float):  # bool is an int
        return float(v)  # raises ValueError on text
    raise ValueError(f"not a number: {v!r}")  # e.g. a JSON list or object


def csv_source(path: str | os.PathLike, rate: float | None = None, batch: int = 256,
               label_column: str | None = None) -> Iterator[Batch]:
    """Replay a CSV's numeric columns at `rate` records per second (as fast as possible when None)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader)]
        keep = [j for j, h in enumerate(header) if h and h != label_column]
        lab = header.index(label_column) if label_column in header else None
        rows, labels, t0, sent = [], [], time.monotonic(), 0
        step = batch if rate is None else max(1, min(batch, int(rate)))
        for r in reader:
            if not r:
                continue
            try:
                rows.append([_to_float(r[j]) for j in keep])
            except ValueError:
                continue  # a text column: not a feature; skipped rows are rare in replay files
            if lab is not None:
                labels.append(float(r[lab]))
            if len(rows) >= step:
                yield Batch([header[j] for j in keep], np.array(rows), np.array(labels) if lab is not None else None)
                sent += len(rows)
                rows, labels = [], []
                if rate:
                    time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
        if rows:
            yield Batch([header[j] for j in keep], np.array(rows), np.array(labels) if lab is not None else None)


def json_lines(lines: Iterator[str], batch: int = 64) -> Iterator[Batch]:
    """Flat JSON objects, one per line (e.g. on stdin); lines that are not objects are skipped."""
    rows: list[dict] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            print(f"fedsentry agent: skipped a line that is not JSON: {line[:80]!r}", file=sys.stderr)
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        if len(rows) >= batch:
            yield _dict_batch(rows)
            rows = []
    if rows:
        yield _dict_batch(rows)


def _dict_batch(rows: list[dict]) -> Batch:
    cols = sorted({k for r in rows for k, v in r.items() if isinstance(v, int | float) and not isinstance(v, bool)})
    X = np.array([[float(r.get(c, 0.0)) if isinstance(r.get(c, 0.0), int | float) else 0.0 for c in cols]
                  for r in rows])
    return Batch(cols, X.reshape(len(rows), len(cols)))


def zeek_record(fields: dict[str, object]) -> dict[str, float]:
    """One conn.log record in the model's vocabulary."""
    out = {model: _to_float(fields.get(zeek, "-")) for zeek, model in ZEEK_FIELDS.items()}
    proto = str(fields.get("proto", "")).lower()
    out["proto_tcp"] = float(proto == "tcp")
    out["proto_udp"] = float(proto == "udp")
    out["conn_rejected"] = float(str(fields.get("conn_state", "")) in REJECTED_STATES)
    return out


class ZeekFollower:
    """Follow a Zeek conn.log (TSV with #fields, or JSON lines) as it grows, across rotation.

    The position (inode, offset, TSV field names) is exposed as ``position`` so the agent can persist
    it and resume where it stopped; a new inode or a shorter file means rotation: start at 0."""

    def __init__(self, path: str | os.PathLike, position: dict | None = None):
        self.path = Path(path)
        self.seek(position)

    def seek(self, position: dict | None) -> None:
        pos = position or {}
        self.inode, self.offset, self.fields = pos.get("inode"), int(pos.get("offset", 0)), pos.get("fields")

    @property
    def position(self) -> dict:
        return {"inode": self.inode, "offset": self.offset, "fields": self.fields}

    def poll(self, max_records: int = 5000) -> Batch | None:
        """Records appended since the last call (None when there are none yet)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.inode, self.offset, self.fields = st.st_ino, 0, None
        records: list[dict[str, float]] = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            while len(records) < max_records:
                line = f.readline()
                if not line or not line.endswith(b"\n"):
                    break  # a partial line: wait until Zeek finishes it
                self.offset += len(line)
                rec = self._parse(line.decode("utf-8", "replace").rstrip("\n"))
                if rec is not None:
                    records.append(rec)
        if not records:
            return None
        cols = list(records[0])
        return Batch(cols, np.array([[r[c] for c in cols] for r in records]))

    def _parse(self, line: str) -> dict[str, float] | None:
        if not line:
            return None
        if line.startswith("#"):
            if line.startswith("#fields"):
                self.fields = line.split("\t")[1:]
            return None
        try:
            if line.startswith("{"):
                return zeek_record(json.loads(line))
            if self.fields is None:
                return None
            return zeek_record(dict(zip(self.fields, line.split("\t"))))
        except (ValueError, json.JSONDecodeError):
            return None
