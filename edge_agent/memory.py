"""What an agent's memory is made of, and how to keep it within a device's budget.

A Pi-class device runs the agent under a memory limit (the systemd unit's MemoryMax). The training buffer is the
one part that grows with the data; everything else (the interpreter, numpy, the MQTT client, a round's chunked
arithmetic) is bounded. `--memory-budget` sizes the buffer so that the process's peak through a training job
stays within the budget (measured by `fedsentry bench agent-memory`, README).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from pathlib import Path

log = logging.getLogger("fedsentry.agent")

#: resident memory of an agent before it holds records: interpreter, numpy, paho-mqtt, its own modules, and a
#: training round's chunked temporaries (measured: bench agent-memory)
FIXED_MIB = 62
#: bytes a buffered record costs at the peak of a training round, per numeric column: the float32 buffer, the
#: training rows taken from it, their columns in the model's order and their standardised copy (4 x 4 bytes),
#: with room for the held-out share and the text fields
BYTES_PER_VALUE = 24
#: no budget buys fewer records than this (a smaller budget is refused)
MIN_RECORDS = 1000


def buffer_capacity(budget_mib: float, columns: int, most: int) -> int:
    """How many records a training buffer may hold so that an agent with `columns` numeric columns stays within
    `budget_mib` through a training job (at most `most`). ValueError when the budget cannot hold MIN_RECORDS."""
    room = (budget_mib - FIXED_MIB) * 2**20 / (BYTES_PER_VALUE * max(columns, 1))
    if room < MIN_RECORDS:
        raise ValueError(f"a memory budget of {budget_mib:g} MiB leaves room for {max(int(room), 0)} training "
                         f"records of {columns} columns; give at least "
                         f"{FIXED_MIB + MIN_RECORDS * BYTES_PER_VALUE * columns / 2**20:.0f} MiB")
    return int(min(room, most))


def rss_mib() -> float:
    """This process's resident memory (VmRSS), in MiB; 0 where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


_libc = None


def release() -> None:
    """Give freed heap memory back to the system (glibc keeps freed blocks below its mmap threshold, which it
    raises as large arrays come and go, so a training round's memory would stay resident while the agent then
    only scores). A no-op where the C library has no malloc_trim."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name) if name else False
    trim = getattr(_libc, "malloc_trim", None) if _libc else None
    if trim is not None:
        trim(0)
