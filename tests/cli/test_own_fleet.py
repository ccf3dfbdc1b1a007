"""The "Your own fleet" commands (issue 28, point 2) run verbatim, as a newcomer pastes them, in a fresh folder:
sample data, serve with the embedded broker, three agents, a job, an API key, and alerts through the API.

The bash block is read from DOC (under HEADING) and run under `bash -e` with a trap that stops its background
jobs at the end, in a new session (every process it starts is in one group, killed if anything is left). When
the system allows it, the block runs in a private network namespace (`unshare -rn`): port 8000 is then free
whatever else runs on this machine, and nothing of the block is reachable from outside."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: where the section lives (README.md once it moves there)
DOC = REPO / "README.md"
HEADING = "## Your own fleet"
#: the whole block, alerts included, within this (about 15 s on two cores when it works)
TIMEOUT = 120.0
DEVICES = ("dev-1", "dev-2", "dev-3")


#: the Zeek-sensor section (issue 24, point 8): one agent following a conn.log a recorded log is appended to
ZEEK_HEADING = "## Running FedSentry on a Zeek sensor"


def fleet_block(text: str, heading: str = HEADING) -> str:
    """The one ```bash block of the section under `heading`."""
    start = text.index(heading + "\n")
    nxt = re.search(r"^## ", text[start + len(heading):], re.M)
    section = text[start:start + len(heading) + nxt.start()] if nxt else text[start:]
    blocks = re.findall(r"^```bash\n(.*?)^```$", section, re.M | re.S)
    assert len(blocks) == 1, f"{DOC.name}: the section {heading!r} should have exactly one ```bash block"
    return blocks[0]


def test_the_section_has_the_commands_and_no_port_to_copy():
    block = fleet_block(DOC.read_text())
    lines = block.splitlines()
    assert lines[0] == "fedsentry sample --out sample"
    assert lines[1].startswith("fedsentry serve ") and lines[1].endswith(" &")
    for d in DEVICES:
        assert f"--enrol {d}" in lines[1]
        agent = next(line for line in lines if f"--id {d} " in line)
        assert agent.startswith("fedsentry agent ") and agent.endswith(" &")
        for part in (f"--mqtt-password-file fedsentry-server/{d}.password", f"--train sample/{d}-train.csv",
                     f"--csv sample/{d}-replay.csv", "--label-column label", "--wait-for-model",
                     "--broker-file fedsentry-server/broker.url"):
            assert part in agent, (d, part)
    assert any(line.startswith("fedsentry job create") and "--features" not in line for line in lines)  # no list
    assert "fedsentry apikey create --role admin" in block and "/api/v1/anomalies" in block
    assert "mqtt://" not in block  # the broker's port is read, not copied


def _private_network() -> bool:
    """Whether `unshare -rn` gives this user a network namespace whose loopback `ip` can bring up."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    try:
        return subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _end_group(pgid: int, grace: float = 15.0) -> list[str]:
    """Stop every process left in the group (SIGTERM, then SIGKILL after `grace`); what had to be stopped."""
    left = []
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return left
        left.append(sig.name)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return left
            time.sleep(0.2)
    return left


def _labels(path: Path) -> dict[int, str]:
    """A replay CSV's label by line number (the header is line 1), as alerts name records (`flow.row`)."""
    lines = path.read_text().splitlines()
    col = lines[0].split(",").index("label")
    return {n: line.split(",")[col] for n, line in enumerate(lines, start=1) if n > 1}


def run_block(tmp_path: Path, heading: str) -> tuple[list[str], Path, float]:
    """Run the section's block verbatim in a fresh folder (a private network where the system gives one): its
    output lines, the folder, and the seconds it took; fails the test if it did not finish or failed."""
    if not shutil.which("curl"):
        pytest.skip("the commands use curl, which is not installed")
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "fedsentry").exists():
        pytest.skip(f"no fedsentry command beside {sys.executable} (install the package: pip install -e .)")
    private = _private_network()
    if not private and not _port_free(8000):
        pytest.skip("port 8000 is in use and this system gives no private network namespace (unshare -rn)")
    work = tmp_path / "fleet"
    work.mkdir()
    script = tmp_path / "fleet.sh"
    script.write_text("trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + fleet_block(DOC.read_text(), heading))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDSENTRY_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    command = ["bash", "-e", str(script)]
    if private:
        command = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    t0 = time.monotonic()
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(command, cwd=work, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        try:
            rc = proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = None
        seconds = time.monotonic() - t0
    finally:
        stopped = _end_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    log = f"stdout:\n{out.read_text()[-3000:]}\nstderr:\n{err.read_text()[-5000:]}"
    assert rc is not None, f"no alerts through the API after {TIMEOUT:.0f} s\n{log}"
    assert rc == 0, f"the block failed ({rc})\n{log}"
    assert not stopped, f"processes outlived the block's trap ({stopped})\n{log}"
    print(f"the block under {heading!r} gave alerts in {seconds:.1f} s "
          f"({'private network' if private else 'host network'})")
    return out.read_text().splitlines(), work, seconds


def alerts_page(lines: list[str]) -> list[dict]:
    page = json.loads(next(line for line in lines if line.startswith('{"items"')))
    assert page["items"], lines
    return page["items"]


def test_the_commands_run_verbatim_give_alerts_through_the_api(tmp_path):
    lines, work, _ = run_block(tmp_path, HEADING)
    labels = {d: _labels(work / "sample" / f"{d}-replay.csv") for d in DEVICES}
    attacks = 0
    for a in alerts_page(lines):
        assert a["device_id"] in DEVICES and a["score"] > a["threshold"], a
        attacks += labels[a["device_id"]][a["flow"]["row"]] == "1"
    assert attacks >= 1, lines  # the alerts find the attacks the sample put in the replay
    assert any(line.startswith("dashboard: http://127.0.0.1:8000/") for line in lines), lines


def test_the_zeek_sensor_commands_run_verbatim_and_alerts_name_the_connection(tmp_path):
    block = fleet_block(DOC.read_text(), ZEEK_HEADING)
    assert "--zeek zeek/conn.log" in block and "mqtt://" not in block
    lines, work, _ = run_block(tmp_path, ZEEK_HEADING)
    # the recorded log's N-th record is the replay CSV's N-th row: its label judges the alert, found by Zeek's uid
    log = [line.split("\t") for line in (work / "sample" / "dev-1-conn.log").read_text().splitlines()
           if line and not line.startswith("#")]
    uid = {row[1]: n for n, row in enumerate(log, start=2)}  # CSV line numbers (the header is line 1)
    labels = _labels(work / "sample" / "dev-1-replay.csv")
    attacks = 0
    for a in alerts_page(lines):
        assert a["device_id"] == "sensor-1" and a["score"] > a["threshold"], a
        assert a["flow"]["uid"] in uid and a["flow"]["id.orig_h"], a  # the connection, named as Zeek does
        attacks += labels[uid[a["flow"]["uid"]]] == "1"
    assert attacks >= 1, lines
