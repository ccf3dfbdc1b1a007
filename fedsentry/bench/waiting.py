"""Waiting on a benchmark's own processes: done, or one of them exited, or too long."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence


class ProcessExitedError(RuntimeError):
    """A process the benchmark started exited while it waited (`index` in the list it gave, `code` its status)."""

    def __init__(self, what: str, index: int, code: int | None):
        super().__init__(f"process {index} exited ({code}) while waiting for {what}")
        self.index, self.code = index, code


def wait_while_running(done: Callable[[], bool], timeout: float, what: str, procs: Sequence[subprocess.Popen],
                       every: float = 0.1) -> None:
    """Return once `done()`; ProcessExitedError if one of `procs` exits first, TimeoutError after `timeout` s."""
    end = time.monotonic() + timeout
    while not done():
        for i, p in enumerate(procs):
            if p.poll() is not None:
                raise ProcessExitedError(what, i, p.returncode)
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(every)
