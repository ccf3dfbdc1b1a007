"""What an agent's memory is made of, and how to keep it within a device's budget.

A Pi-class device runs the agent under a memory limit (the systemd unit's MemoryMax). The training buffer is the
one part that grows with the data; everything else (the interpreter, numpy, the MQTT client, a round's chunked
arithmetic) is bounded. `--memory-budget` sizes the buffer so that the process's peak through a training job
stays within the budget (measured by `fedsentry bench agent-memory`, README).
"""

from __future__ import annotations

import ctypes
import logging
import random
import sys
from pathlib import Path

from wire.imports import stand_ins

log = logging.getLogger("fedsentry.agent")

#: peak resident memory of an agent through a training job, before its records count: interpreter, numpy,
#: paho-mqtt, its own modules, the broadcast mixture and a round's chunked temporaries (measured with
#: `fedsentry bench agent-memory`: 79 MiB at 20,000 records of 33 columns, 83 MiB at 50,000, so about 76 MiB
#: with none; rounded up)
FIXED_MIB = 78
#: bytes one buffered value costs at the peak of a round: the float32 buffer, the standardised training copy
#: and the statistics phase's copy of the training rows (3 x 4 bytes; measured: about 5 bytes a value beyond
#: the buffer at 33 columns), with room to spare
BYTES_PER_VALUE = 16
#: no budget buys fewer records than this
MIN_RECORDS = 1000
#: the smallest budget an agent accepts (MiB): room for MIN_RECORDS records of a hundred columns
MIN_BUDGET = FIXED_MIB + 2


def buffer_capacity(budget_mib: float, columns: int, most: int) -> int:
    """How many records a training buffer may hold so that an agent with `columns` columns stays within
    `budget_mib` through a training job: at most `most`, at least MIN_RECORDS."""
    room = (budget_mib - FIXED_MIB) * 2**20 / (BYTES_PER_VALUE * max(columns, 1))
    return int(min(max(room, MIN_RECORDS), most))


def rss_mib() -> float:
    """This process's resident memory (VmRSS), in MiB; 0 where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


_libc: ctypes.CDLL | bool | None = None
#: glibc's mallopt parameter for the size from which blocks are mapped on their own (and unmapped when freed)
M_MMAP_THRESHOLD = -3
#: glibc's mallopt parameter for the number of malloc arenas
M_ARENA_MAX = -8
#: blocks from this size on are mapped on their own: a chunk's temporaries (0.25-2 MiB) go back to the system
#: the moment they are freed, instead of growing a heap that fragments
MMAP_FROM = 128 * 1024


def libc():
    """The C library's functions, as the process has them (dlopen(NULL): the interpreter's own C library, where
    ctypes.util.find_library ran `ldconfig -p` in a child process and imported subprocess); False without one."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None)
        except (OSError, TypeError):
            _libc = False
    return _libc


def settle_allocator() -> None:
    """Keep glibc's mmap threshold where it starts (128 KiB) for the whole process: by default it rises to the
    size of the largest block freed (up to 32 MiB), after which every chunk's temporaries come from the heap,
    which fragments and stays resident (measured: 6 MiB more while scoring after a threshold was set from a
    device's held-out records; `fedsentry bench agent-memory`). A no-op without glibc's mallopt."""
    setter = getattr(libc(), "mallopt", None) if libc() else None
    if setter is not None:
        setter(M_MMAP_THRESHOLD, MMAP_FROM)
        setter(M_ARENA_MAX, 1)


def release() -> None:
    """Give freed heap memory back to the system (glibc keeps freed blocks below its mmap threshold, which it
    raises as large arrays come and go, so a training round's memory would stay resident while the agent then
    only scores). A no-op where the C library has no malloc_trim."""
    trim = getattr(libc(), "malloc_trim", None) if libc() else None
    if trim is not None:
        trim(0)


def import_numpy_random() -> None:
    """Import numpy.random (a job's k-means seeding and the training reservoir need it) without `secrets`, which
    numpy imports for one function, `randbits`, and which imports `hmac`, whose `_hashlib` maps OpenSSL's
    libcrypto: 3.4 MiB resident that nothing else in an agent uses (measured with `fedsentry bench
    agent-memory`). numpy is given the same function: secrets defines `randbits` as a SystemRandom's
    getrandbits (the operating system's random bytes; no state). Call before numpy.random is first used."""
    if "numpy.random" in sys.modules:
        return
    with stand_ins({"secrets": {"randbits": random.SystemRandom().getrandbits}}):
        import numpy.random  # noqa: F401
