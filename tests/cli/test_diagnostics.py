"""A process that seems stuck says what it waits on: `kill -USR1 PID` prints every thread's stack on stderr and
the process goes on (the demo test uses it when a shutdown overruns)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from coordinator.broker import free_port


def test_sigusr1_prints_every_threads_stack_and_the_process_goes_on(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "agent", "--broker",
                             f"mqtt://127.0.0.1:{free_port()}", "--id", "stuck", "--state-dir", str(tmp_path / "a")],
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        assert proc.poll() is None  # still running
    finally:
        proc.terminate()
        err = proc.communicate(timeout=30)[1]
    assert "Current thread" in err or "Thread 0x" in err, err[-2000:]
    assert "edge_agent" in err  # the agent's own frames
