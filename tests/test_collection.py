"""The suite collects the same tests whenever it is imported. pytest-xdist's workers each import every test module,
at moments a second or more apart, and stop the whole run ("Different tests were collected between gw0 and gw1")
when their lists differ: a parameter id built from the clock (a module-level `datetime.now()` in an id) failed a
fresh-clone CI run that way, and only when the workers' imports fell in different seconds. This test makes that
deterministic: it collects the files this session collected again, in a new process started later, and compares."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_later_collection_finds_the_same_test_ids(request):
    ours = sorted(item.nodeid for item in request.session.items)
    files = sorted({nodeid.split("::")[0] for nodeid in ours})
    time.sleep(1.1)  # at least one clock second after this process collected, whatever ran before
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                          *files], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    theirs = sorted(line for line in out.stdout.splitlines() if "::" in line)
    # (a session run with -k or -m holds fewer than its files: only ids it held and a later import lost count)
    lost = sorted(set(ours) - set(theirs))
    assert not lost, f"{len(lost)} test ids this session collected are gone a second later: {lost[:5]}"
