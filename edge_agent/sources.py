"""Where an agent's traffic comes from: a CSV replayed at a rate, JSON lines on stdin, or a Zeek
conn.log (TSV or JSON) followed as it grows, across rotation. Every source yields batches of named
columns; ``select`` maps them by name onto a model's feature schema.

Zeek's conn.log names the originator and responder ``orig_*`` and ``resp_*``; the model uses TON-IoT's
``src_*`` and ``dst_*``. ZEEK_FIELDS is the mapping; ``proto`` becomes the indicators ``proto_tcp`` and
``proto_udp``; ``conn_state`` becomes ``conn_rejected`` (1 for REJ, S0, RSTOS0, RSTRH, SH, SHR). An unset
number (``-``, or whatever the log's ``#unset_field`` says; a field absent from a JSON record) is missing:
NaN, never 0. The batch also keeps the text fields (``proto``, ``service``, ``conn_state``, ``history`` and
the flow's identifiers ``uid``, ``ts``, ``id.*``) for the feature encoder (``encode_batch``) and alerts. A line
or record of a Zeek log the reader cannot use is refused, counted and read past (``ZeekFollower``, with the
bounds of edge_agent.zeek_input).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

import numpy as np

from edge_agent.zeek_input import (
    MAX_LINE,
    MAX_TEXT,
    POLL_BYTES,
    NotRegularFileError,
    ZeekInputError,
    check_regular,
    decode_separator,
    json_record,
    open_regular,
)
from models.detection.encoding import FeatureEncoder, RecordSchema, local_counts
from wire.flows import clean_flow

log = logging.getLogger("fedsentry.agent")

ZEEK_FIELDS = {
    "duration": "duration", "orig_bytes": "src_bytes", "resp_bytes": "dst_bytes", "missed_bytes": "missed_bytes",
    "orig_pkts": "src_pkts", "orig_ip_bytes": "src_ip_bytes", "resp_pkts": "dst_pkts",
    "resp_ip_bytes": "dst_ip_bytes",
}
REJECTED_STATES = {"REJ", "S0", "RSTOS0", "RSTRH", "SH", "SHR"}
# conn.log's text fields a Zeek batch keeps: the categories the encoder one-hots and the flow's identifiers
ZEEK_TEXT = ("proto", "service", "conn_state", "history", "uid", "ts", "id.orig_h", "id.orig_p", "id.resp_h",
             "id.resp_p")
# the flow's identifiers: carried to alerts, never features (`row`: a CSV source's line number)
FLOW_FIELDS = ("uid", "ts", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p", "row")
# what an alert carries of its record, so that an analyst can find the connection
ALERT_FLOW_FIELDS = (*FLOW_FIELDS, "proto", "service")


class Source(Protocol):
    """Where an agent's traffic comes from: a CSV file or JSON lines (`Replay`), a Zeek conn.log followed as it
    grows (`ZeekFollower`). The agent reads batches and saves the position past each batch with the alerts it
    raised, in one transaction, so that a restarted agent neither skips nor repeats records."""

    def poll(self) -> Batch | Literal[False] | None:
        """The next batch; None when nothing is there yet; False once the source is exhausted."""

    @property
    def position(self) -> dict[str, Any] | None:
        """Where reading resumes after a restart; None for a source that cannot resume."""

    def seek(self, position: dict[str, Any] | None) -> None:
        """Resume at a saved position."""


class Replay:
    """A finite stream of batches (a CSV file, JSON lines on stdin): read once, not resumable."""

    def __init__(self, batches: Iterator[Batch]):
        self.batches = batches

    def poll(self) -> Batch | Literal[False]:
        return next(self.batches, False)

    @property
    def position(self) -> None:
        return None

    def seek(self, position: dict[str, Any] | None) -> None:
        """Nothing to resume: a replay starts from its beginning."""


def as_source(source: Source | Iterator[Batch] | None) -> Source | None:
    """A source as the agent reads it: iterators of batches are replays."""
    if source is None or hasattr(source, "poll"):
        return source  # type: ignore[return-value]
    return Replay(source)


def flows(batch: Batch, rows: np.ndarray) -> list[dict[str, str | int]]:
    """The flow fields of the records at `rows` (those a source provides; unset ones left out), as the coordinator
    keeps them (wire.flows: text escaped and bounded; whatever the traffic holds, the alert goes out)."""
    text = batch.text or {}
    fields = [f for f in ALERT_FLOW_FIELDS if f in text]
    out = []
    for i in rows:
        flow: dict[str, str | int] = {}
        for f in fields:
            v = text[f][i]
            if v is not None and v != "":
                flow[f] = int(v) if f == "row" else str(v)
        out.append(clean_flow(flow)[0] or {})
    return out
ZEEK_UNSET, ZEEK_EMPTY = "-", "(empty)"  # Zeek's defaults for #unset_field and #empty_field


@dataclass
class Batch:
    columns: list[str]
    X: np.ndarray  # (n, len(columns)) float; NaN where a value is missing
    labels: np.ndarray | None = None  # only for evaluation in the demo; never reaches the model
    text: dict[str, np.ndarray] | None = None  # text fields: (n,) object arrays of str, None when unset


class SchemaError(ValueError):
    """Input that cannot supply the model's features."""


class ZeekRecordError(SchemaError, ZeekInputError):
    """A line or record of a Zeek log refused (edge_agent.zeek_input), with its file and line."""

    def __init__(self, path: Path, line: int, refused: ZeekInputError):
        ZeekInputError.__init__(self, refused.kind, f"{path}, line {line}: {refused}")
        self.path, self.line = path, line


class ZeekLineError(ZeekRecordError):
    """A Zeek TSV record whose number of columns is not that of its log's #fields line."""

    def __init__(self, path: Path, line: int, found: int, expected: int):
        why = (f"{found} columns where the #fields line names {expected}: a torn or damaged record, or lines of "
               "another log; remove or repair that line")
        super().__init__(path, line, ZeekInputError("columns", why))
        self.found, self.expected = found, expected


def take_rows(batch: Batch, rows: np.ndarray | slice) -> Batch:
    """The records of a batch at `rows` (a mask or indices), text fields included."""
    return Batch(batch.columns, batch.X[rows], None if batch.labels is None else batch.labels[rows],
                 None if batch.text is None else {f: v[rows] for f, v in batch.text.items()})


def select(batch: Batch, features: list[str], fill: float | None = None, rows: np.ndarray | None = None) -> np.ndarray:
    """The batch's columns in the order of the model's features (of the records at `rows` only, a mask or
    indices: one copy, not two); refuse if any is missing.

    Missing values stay NaN unless `fill` is given: the caller decides what a missing value means."""
    index = {c: j for j, c in enumerate(batch.columns)}
    missing = [f for f in features if f not in index]
    if missing:
        raise SchemaError(f"input lacks the model's features: {', '.join(missing)}")
    cols = [index[f] for f in features]
    if rows is None:
        X = batch.X[:, cols]
    else:
        rows = np.flatnonzero(rows) if rows.dtype == bool else rows
        X = batch.X[np.ix_(rows, np.array(cols, dtype=np.int64))]
    if fill is not None:
        X[np.isnan(X)] = fill  # X is a copy (fancy indexing)
    return X


def _text_columns(batch: Batch, fields: list[str]) -> dict[str, np.ndarray]:
    text = batch.text or {}
    absent = [f for f in fields if f not in text]
    if absent:
        raise SchemaError(f"input lacks the model's text fields: {', '.join(absent)}")
    return {f: text[f] for f in fields}


def encode_batch(batch: Batch, encoder: FeatureEncoder) -> np.ndarray:
    """The batch in the encoder's columns (missing numbers NaN with their indicators, one-hot categories,
    flags); SchemaError if the batch lacks a field the encoder needs."""
    return encoder.encode(select(batch, encoder.numeric), _text_columns(batch, [*encoder.categorical,
                                                                                *encoder.flags]))


def batch_counts(batch: Batch, schema: RecordSchema, max_values: int | None = None,
                 numeric: np.ndarray | None = None) -> dict[str, Any]:
    """The batch's ``local_counts`` under `schema`: what a device reports to agree the vocabulary. `numeric`:
    the batch's numeric columns in the schema's order, when the caller has them already."""
    text = _text_columns(batch, [*schema.categorical, *schema.flags])
    X = select(batch, schema.numeric) if numeric is None else numeric
    return local_counts(schema, X, text) if max_values is None else local_counts(schema, X, text, max_values)


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
        first = next(reader, None)
        if first is None:
            return  # an empty file: no records
        header = [h.strip() for h in first]
        keep = [j for j, h in enumerate(header) if h and h != label_column]
        lab = header.index(label_column) if label_column in header else None
        rows, labels, lines, t0, sent = [], [], [], time.monotonic(), 0
        step = batch if rate is None else max(1, min(batch, int(rate)))
        for r in reader:
            if not r:
                continue
            try:
                rows.append([_to_float(r[j]) for j in keep])
            except ValueError:
                continue  # a text column: not a feature; skipped rows are rare in replay files
            lines.append(reader.line_num)  # the record's line in the file (header = 1): alerts name it
            if lab is not None:
                labels.append(float(r[lab]))
            if len(rows) >= step:
                yield Batch([header[j] for j in keep], np.array(rows), np.array(labels) if lab is not None else None,
                            {"row": np.array(lines, dtype=object)})
                sent += len(rows)
                rows, labels, lines = [], [], []
                if rate:
                    time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
        if rows:
            yield Batch([header[j] for j in keep], np.array(rows), np.array(labels) if lab is not None else None,
                        {"row": np.array(lines, dtype=object)})


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


def _zeek_number(v: object, unset: str, empty: str) -> float:
    """A conn.log number: NaN when unset, empty or absent; ZeekInputError when it is not a finite number (text, inf,
    nan, 1e400, digits beyond float range) or is a JSON list or object."""
    if v is None or v in (unset, empty, ""):
        return float("nan")
    if isinstance(v, dict | list):
        raise ZeekInputError("nested", f"a JSON {'object' if isinstance(v, dict) else 'list'} where a number belongs")
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise ZeekInputError("number", f"not a number: {v!r}")
    try:
        x = float(v)
    except OverflowError:  # an integer beyond float range (text beyond it reads as inf)
        x = float("inf")
    except ValueError:
        raise ZeekInputError("number", f"not a number: {str(v)[:40]!r}") from None
    if not np.isfinite(x):
        raise ZeekInputError("number", f"not a finite number: {str(v)[:40]}{'...' if len(str(v)) > 40 else ''}")
    return x


def _zeek_text(v: object, unset: str, empty: str) -> str | None:
    """A conn.log text field: None when unset or absent, "" when empty (e.g. a history with no flags); ZeekInputError
    for a JSON object, a list holding lists or objects (Zeek's sets and vectors are flat), or over MAX_TEXT."""
    if v is None or v == unset:
        return None
    if v == empty:
        return ""
    if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, dict | list) for x in v)):
        what = "object" if isinstance(v, dict) else "list"
        raise ZeekInputError("nested", f"a nested JSON {what} where text belongs")
    text = ",".join(map(str, v)) if isinstance(v, list) else str(v)  # a JSON set or vector: as TSV writes it
    if len(text) > MAX_TEXT:
        raise ZeekInputError("long", f"{len(text)} characters where Zeek writes at most a few dozen (the reader "
                                     f"takes {MAX_TEXT})")
    return text


def _field(parse: Callable[[object, str, str], Any], fields: dict[str, object], name: str, unset: str,
           empty: str) -> Any:
    """One field parsed; a refusal names the field."""
    try:
        return parse(fields.get(name), unset, empty)
    except ZeekInputError as e:
        raise ZeekInputError(e.kind, f"{name}: {e}") from None


def zeek_record(fields: dict[str, object], unset: str = ZEEK_UNSET, empty: str = ZEEK_EMPTY) -> dict[str, float]:
    """One conn.log record's numbers in the model's vocabulary; unset numbers are NaN; ZeekInputError (naming the
    field) for a value that is not a finite number. (zeek_text refuses a nested proto or conn_state.)"""
    out = {model: _field(_zeek_number, fields, zeek, unset, empty) for zeek, model in ZEEK_FIELDS.items()}
    proto = str(fields.get("proto", "")).lower()
    out["proto_tcp"] = float(proto == "tcp")
    out["proto_udp"] = float(proto == "udp")
    out["conn_rejected"] = float(str(fields.get("conn_state", "")) in REJECTED_STATES)
    return out


def zeek_text(fields: dict[str, object], unset: str = ZEEK_UNSET, empty: str = ZEEK_EMPTY) -> dict[str, str | None]:
    """One conn.log record's text fields (ZEEK_TEXT): None when unset; ZeekInputError (naming the field) for a nested
    JSON value."""
    return {f: _field(_zeek_text, fields, f, unset, empty) for f in ZEEK_TEXT}


class ZeekFollower:
    """Follow a Zeek conn.log (TSV with #fields, or JSON lines) as it grows, across rotation.

    TSV logs are read with their own ``#separator``, ``#unset_field`` and ``#empty_field``. The position
    (inode, offset, TSV header) is exposed as ``position`` so the agent can persist it and resume where it
    stopped. Rotation loses nothing: when the followed name holds a new file, the file being read (found by
    its inode among its neighbours, also after a restart) is read to its end first, then the new one from 0;
    a file shorter than the position (truncated in place) is read again from 0.

    No content of the log stops it (edge_agent.zeek_input): a line or record it cannot use is refused, counted
    in ``refused`` by kind, logged (the file and line) the first time of each kind and every 1000th after, and
    read past; every other record is read. The kinds: ``columns`` (a TSV record whose number of columns is not
    that of the #fields line: a sensor that crashed mid-line and started again leaves a torn record), ``long``
    (a line over MAX_LINE bytes, never held whole, or a text field read over MAX_TEXT characters), ``json`` (a
    line that is not a JSON object), ``number`` (a number that is not a finite one: text, inf, nan, 1e400, an
    integer beyond 64 bits), ``nested`` (a JSON list or object in a field read, or JSON nested too deeply),
    ``separator`` (a #separator header Zeek would not write) and ``header`` (a TSV record without a usable
    header: none yet, or a refused #separator). A record
    is refused whole, as the CSV replay skips a row with a value that is not a number: NaN in a record means
    unset, which Zeek writes as ``-``, never as a number. A partial last line is only read once it is complete.
    With `strict` (a training file) the first refusal raises ZeekRecordError instead.

    A path that is not a regular file (a directory, a FIFO, a device such as /dev/zero) is refused:
    NotRegularFileError when the follower is made, an error in the log (once) and nothing read while it stays so
    later (likewise a file it may not read); the position is kept."""

    def __init__(self, path: str | os.PathLike, position: dict | None = None, strict: bool = False):
        self.path, self.strict = Path(path), strict
        self.refused: Counter[str] = Counter()
        self._not_regular = ""  # the refusal of the path last logged, while it lasts
        check_regular(self.path)
        self.seek(position)

    @property
    def malformed(self) -> int:
        """TSV records refused for their number of columns."""
        return self.refused["columns"]

    def seek(self, position: dict | None) -> None:
        pos = position or {}
        self.inode, self.offset, self.fields = pos.get("inode"), int(pos.get("offset", 0)), pos.get("fields")
        # lines read so far, for messages; counted from the file when a saved position lacks it
        self.line: int | None = pos.get("line", 0 if self.offset == 0 else None)
        self.skipping: bool = bool(pos.get("skipping", False))  # inside a refused long line: dropped to its end
        self.separator: str | None = pos.get("separator", "\t")  # None: refused, until a valid #separator
        self.unset: str = pos.get("unset", ZEEK_UNSET)
        self.empty: str = pos.get("empty", ZEEK_EMPTY)

    @property
    def position(self) -> dict:
        return {"inode": self.inode, "offset": self.offset, "line": self.line, "fields": self.fields,
                "separator": self.separator, "unset": self.unset, "empty": self.empty, "skipping": self.skipping}

    def poll(self, max_records: int = 5000) -> Batch | None:
        """Records appended since the last call (None when there are none yet)."""
        records: list[tuple[dict[str, float], dict[str, str | None]]] = []
        budget = [POLL_BYTES]
        while len(records) < max_records:
            try:
                source, rotated = self._source()
                if source is None:
                    break
                complete = self._read(source, records, max_records, budget)
            except (NotRegularFileError, PermissionError) as e:
                self._refuse_path(e)
                break
            if not (rotated and complete):
                break
            try:  # the rotated file is read to its end: on to the file that now has the name
                self.seek({"inode": self.path.stat().st_ino})
            except FileNotFoundError:
                break
        if not records:
            return None
        cols = list(records[0][0])
        text = {}
        for name in ZEEK_TEXT:
            col = np.empty(len(records), dtype=object)
            col[:] = [t[name] for _, t in records]
            text[name] = col
        return Batch(cols, np.array([[r[c] for c in cols] for r, _ in records], dtype=float), text=text)

    def _source(self) -> tuple[Path | None, bool]:
        """The file holding the position, and whether it is a rotated one (no longer under the name);
        NotRegularFileError when the name holds something else than a regular file (the position is kept)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            st = None
        if self.inode is None or (st is not None and st.st_ino == self.inode):
            if st is None:
                return None, False
            check_regular(self.path)
            if self.inode is None or st.st_size < self.offset:  # first look, or truncated in place
                self.seek({"inode": st.st_ino})
            return self.path, False
        rotated = self._by_inode(self.inode)
        if rotated is not None:
            return rotated, True
        if st is None:
            return None, False
        check_regular(self.path)
        self.seek({"inode": st.st_ino})  # the file we were reading is gone: the new one from its start
        return self.path, False

    def _by_inode(self, inode: int) -> Path | None:
        """The file beside the followed one that has this inode (where rotation renamed it), if any."""
        try:
            with os.scandir(self.path.parent) as entries:
                for e in entries:
                    if e.is_file(follow_symlinks=False) and e.inode() == inode:
                        return Path(e.path)
        except OSError:
            return None
        return None

    def _read(self, path: Path, records: list, max_records: int, budget: list[int]) -> bool:
        """Complete lines of `path` from the position into records, at most budget[0] bytes (what is read is
        taken off it); True when it reached the file's end. A line is read MAX_LINE + 1 bytes at most: one
        longer is refused and the rest of it dropped as it is read, however long it is."""
        with open_regular(path) as f:
            self._not_regular = ""
            if self.line is None:
                self.line = _lines_before(f, self.offset)
            f.seek(self.offset)
            while len(records) < max_records and budget[0] > 0:
                line = f.readline(MAX_LINE + 1)
                complete = line.endswith(b"\n")
                if self.skipping:  # inside a refused long line: dropped as it is read
                    self.offset += len(line)
                    budget[0] -= len(line)
                    self.skipping = not complete
                    if not complete and len(line) <= MAX_LINE:
                        return True  # the file's end: the rest of the line is not written yet
                    continue
                if not complete and len(line) <= MAX_LINE:
                    return True  # the end, or a partial line: Zeek is still writing it (or never will, if rotated)
                self.offset += len(line)
                budget[0] -= len(line)
                self.line += 1
                if not complete:
                    self.skipping = True
                    self._refuse(path, ZeekInputError("long", f"a line longer than {MAX_LINE} bytes"))
                    continue
                rec = self._parse(line.decode("utf-8", "replace").rstrip("\n"), path)
                if rec is not None:
                    records.append(rec)
        return False

    def _refuse(self, path: Path, refused: ZeekInputError) -> None:
        """A line or record refused: raised (strict), or counted and logged (the first of its kind, then every
        1000th)."""
        error = refused if isinstance(refused, ZeekRecordError) else ZeekRecordError(path, self.line or 0, refused)
        if self.strict:
            raise error
        self.refused[error.kind] += 1
        n = self.refused[error.kind]
        if n == 1:
            log.warning("zeek record skipped (%s; further ones are counted, every 1000th logged): %s", error.kind,
                        error)
        elif n % 1000 == 0:
            log.warning("zeek record skipped (%s, %d so far): %s", error.kind, n, error)

    def _refuse_path(self, error: OSError) -> None:
        """The followed name holds something other than a regular file, or one it may not read: an error, once
        while it lasts."""
        if str(error) != self._not_regular:
            self._not_regular = str(error)
            self.refused["not_regular"] += 1
            log.error("zeek log refused: %s; waiting for a regular file there (position kept)", error)

    def _parse(self, line: str, path: Path) -> tuple[dict[str, float], dict[str, str | None]] | None:
        """A record of the log (None for a header, or a record refused); headers update the TSV settings."""
        if not line:
            return None
        try:
            if line.startswith("#"):
                self._header(line)
                return None
            if line.startswith(("{", "[")):
                obj = json_record(line)  # JSON logs leave unset fields out
                return zeek_record(obj, self.unset, self.empty), zeek_text(obj, self.unset, self.empty)
            if self.fields is None or self.separator is None:
                raise ZeekInputError("header", "a TSV record without a usable header (#separator and #fields)")
            cells = line.split(self.separator)
            if len(cells) != len(self.fields):
                raise ZeekLineError(path, self.line or 0, len(cells), len(self.fields))
            record = dict(zip(self.fields, cells))
            return zeek_record(record, self.unset, self.empty), zeek_text(record, self.unset, self.empty)
        except ZeekInputError as refused:
            self._refuse(path, refused)
            return None

    def _header(self, line: str) -> None:
        """A header line; ZeekInputError for a #separator Zeek would not write (the TSV header is then unusable)."""
        if line.startswith("#separator"):
            self.separator, self.fields = None, None
            self.separator = decode_separator(line)
        elif self.separator is None:
            return  # the header's other lines cannot be read without its separator
        elif line.startswith("#fields"):
            self.fields = line.split(self.separator)[1:]
        elif line.startswith("#unset_field"):
            self.unset = line.split(self.separator, 1)[-1]
        elif line.startswith("#empty_field"):
            self.empty = line.split(self.separator, 1)[-1]


def _lines_before(f: BinaryIO, offset: int) -> int:
    """The number of lines in the first `offset` bytes of a file, read in chunks (a log can be large)."""
    f.seek(0)
    lines, left = 0, offset
    while left > 0 and (chunk := f.read(min(left, 1 << 20))):
        lines += chunk.count(b"\n")
        left -= len(chunk)
    return lines
