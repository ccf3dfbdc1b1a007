"""What a followed Zeek log may contain, bounded: the checks the Zeek reader (edge_agent.sources.ZeekFollower)
makes before a line becomes a record, so that no content of the log can crash the agent or hold it.

- A line longer than MAX_LINE bytes is refused (Zeek's conn.log lines are a few hundred bytes); the reader
  never holds more than MAX_LINE + 1 bytes of it (it reads the rest in chunks of at most that and drops them).
  A record whose text field read is longer than MAX_TEXT characters is refused too (edge_agent.sources).
- A path that is not a regular file (a directory, a FIFO, a device such as /dev/zero, through a symlink or
  not) is never read: ``open_regular`` opens without blocking and checks the open file itself.
- ``#separator`` is decoded as Zeek writes it (``\\x09``: each byte as a hex escape); any other escape, or an
  empty separator, refuses the header (``ZeekInputError``).
- A JSON record is refused whole for a number Zeek cannot write: an integer beyond 64 bits, a number beyond
  float range (1e400), NaN or Infinity (JSON has neither), anywhere in the record; and for nesting deeper
  than Python's decoder allows.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

from wire.flows import MAX_TEXT as FLOW_TEXT

#: the longest line the Zeek reader accepts, in bytes (its newline excluded); longer ones are refused
MAX_LINE = 64 * 1024
#: the longest text field the Zeek reader accepts, in characters: conn.log's (proto, service, conn_state, history,
#: the flow's identifiers) are a few to a few dozen; the training reservoir keeps them for 50,000 records
MAX_TEXT = FLOW_TEXT  # a text field no longer than an alert keeps it (wire.flows)
#: the bytes one poll reads at most (refused long lines included): the agent's loop is never held longer
POLL_BYTES = 32 * 1024 * 1024
#: the most digits of an integer Zeek writes (count: unsigned 64 bits, 20 digits; int: 19 and a sign)
MAX_DIGITS = 20

_SEPARATOR = re.compile(r"(?:\\x[0-9A-Fa-f]{2}|[^\\\r\n])+")


class ZeekInputError(ValueError):
    """A line or record of a Zeek log the reader will not use; `kind` names the rule it breaks (counted)."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


class NotRegularFileError(OSError):
    """The followed path holds something other than a regular file: it is not read."""

    def __init__(self, path: Path, mode: int):
        target = os.path.realpath(path)
        where = f" ({target})" if target != os.path.abspath(path) else ""
        super().__init__(f"{path}{where} is {kind_of_file(mode)}, not a regular file: it is not read (point the "
                         f"agent at Zeek's conn.log)")
        self.path = path


def kind_of_file(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def open_regular(path: Path) -> BinaryIO:
    """`path` open for reading; NotRegularFileError when what is there is not a regular file. Opened without
    blocking (a FIFO with no writer would block an ordinary open) and checked on the open file, so a path
    swapped between a check and the open is still refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: Path) -> os.stat_result | None:
    """The path's status (through symlinks); None when nothing is there; NotRegularFileError when it is not a
    regular file."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(path, st.st_mode)
    return st


def decode_separator(line: str) -> str:
    """The separator a ``#separator \\x09`` header announces: ``\\xHH`` escapes (as Zeek writes it) and plain
    characters; ZeekInputError for another escape, a truncated one, none at all, or bytes that are not UTF-8."""
    _, _, value = line.partition(" ")
    if not _SEPARATOR.fullmatch(value):
        raise ZeekInputError("separator", f"#separator {value[:40]!r} is not a separator as Zeek writes it (such as "
                                   "\\x09): this log's TSV records are refused until a valid #separator line")
    raw = re.sub(rb"\\x([0-9A-Fa-f]{2})", lambda m: bytes.fromhex(m.group(1).decode()), value.encode())
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ZeekInputError("separator", f"#separator {value[:40]!r} decodes to bytes that are not UTF-8: this log's "
                                   "TSV records are refused until a valid #separator line") from None


def _integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise ZeekInputError("number", f"an integer of {digits} digits (Zeek writes at most {MAX_DIGITS})")
    return int(text)


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ZeekInputError("number", f"{text[:40]} is not a finite number")
    return x


def _constant(name: str) -> float:
    raise ZeekInputError("number", f"{name} is not a finite number")


def json_record(line: str) -> dict[str, Any]:
    """A line of a Zeek JSON log as its object; ZeekInputError when it is not an object, when a number in it is one
    Zeek cannot write, or when it nests deeper than the decoder allows."""
    try:
        obj = json.loads(line, parse_int=_integer, parse_float=_finite, parse_constant=_constant)
    except RecursionError:
        raise ZeekInputError("nested", "JSON nested too deeply") from None
    except json.JSONDecodeError as e:
        raise ZeekInputError("json", f"not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ZeekInputError("json", f"JSON {type(obj).__name__}, not an object")
    return obj
