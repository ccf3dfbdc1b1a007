"""No line of a followed Zeek log stalls the agent (issue 24, point 5). Each input that once crash-looped it
without moving its position (nested JSON, huge integers, 1e400, a ``#separator \\x`` escape), held it (a
200 MB line: 443 MB resident) or exhausted its memory (conn.log a symlink to /dev/zero) is refused, counted by
kind and logged once with its file and line; the position moves past it, and every good record before and
after it is read (and, by a running agent, scored)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from coordinator.broker import free_port
from edge_agent.sources import ZeekFollower
from edge_agent.zeek_input import MAX_LINE, NotRegularFileError
from tests.edge_agent import zeek_hostile
from tests.edge_agent.test_sources_scorer import CONN_HEADER, CONN_JSON, CONN_RECORDS, FIELDS

HEADER_LINES = CONN_HEADER.count("\n")  # 8
TSV_FIELDS = FIELDS.split()
GOOD_TSV = [line.split("\t")[1] for line in CONN_RECORDS]  # their uids
GOOD_JSON = ["CxT1", "CxT2"]
JSON_CASES = zeek_hostile.json_lines(CONN_JSON[0])
TSV_CASES = zeek_hostile.tsv_lines(CONN_RECORDS[0], TSV_FIELDS)


def read_all(f: ZeekFollower) -> list[str]:
    uids: list[str] = []
    while (batch := f.poll()) is not None:
        uids += list(batch.text["uid"])
    return uids


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(("line", "kind"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_a_json_record_zeek_cannot_write_is_refused_alone(tmp_path, caplog, line, kind):
    """Refused whole (a record with a number that is not a finite one, or a nested value where a field's value
    belongs); twice in a row: counted twice, logged once, with the file and the line."""
    log = tmp_path / "conn.log"
    log.write_text(CONN_JSON[0] + "\n" + line + "\n" + line + "\n" + CONN_JSON[1] + "\n")
    f = ZeekFollower(log)
    with caplog.at_level(logging.WARNING, logger="fedsentry.agent"):
        assert read_all(f) == GOOD_JSON
    assert f.refused == {kind: 2}
    (warning,) = warnings(caplog)
    assert f"{log}, line 2: " in warning and f"({kind};" in warning
    assert (f.offset, f.line) == (log.stat().st_size, 4)  # past it


@pytest.mark.parametrize(("line", "kind"), [c[1:] for c in TSV_CASES], ids=[c[0] for c in TSV_CASES])
def test_a_tsv_record_with_a_number_that_is_not_a_finite_one_is_refused_alone(tmp_path, caplog, line, kind):
    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + CONN_RECORDS[0] + "\n" + line + "\n" + CONN_RECORDS[1] + "\n")
    f = ZeekFollower(log)
    with caplog.at_level(logging.WARNING, logger="fedsentry.agent"):
        assert read_all(f) == GOOD_TSV[:2]
    assert f.refused == {kind: 1}
    (warning,) = warnings(caplog)
    assert f"{log}, line {HEADER_LINES + 2}: {'history' if kind == 'long' else 'orig_bytes'}: " in warning
    assert f"({kind};" in warning
    assert f.offset == log.stat().st_size


@pytest.mark.parametrize("separator", ["\\x", "\\x0", "\\xzz", "\\u0009", "\\t", "", "\\xff"])
def test_a_separator_zeek_would_not_write_refuses_its_header_not_the_log(tmp_path, caplog, separator):
    """The header block is refused and so are the TSV records under it (they cannot be split); the records
    before it, and those under the next valid header, are read."""
    log = tmp_path / "conn.log"
    bad = zeek_hostile.separator_block(CONN_HEADER, separator)
    log.write_text(CONN_HEADER + CONN_RECORDS[0] + "\n" + bad + CONN_RECORDS[1] + "\n" + CONN_RECORDS[1] + "\n"
                   + CONN_HEADER + CONN_RECORDS[2] + "\n")
    f = ZeekFollower(log)
    with caplog.at_level(logging.WARNING, logger="fedsentry.agent"):
        assert read_all(f) == [GOOD_TSV[0], GOOD_TSV[2]]
    assert f.refused == {"separator": 1, "header": 2} and f.offset == log.stat().st_size
    separator_warning, header_warning = warnings(caplog)
    assert f"{log}, line {HEADER_LINES + 2}: #separator" in separator_warning
    assert f"{log}, line {2 * HEADER_LINES + 2}: a TSV record without a usable header" in header_warning


def test_a_separator_is_decoded_as_zeek_writes_it(tmp_path):
    """Zeek writes its separator as hex escapes (the default ``#separator \\x09``): any one, not only a tab."""
    log = tmp_path / "conn.log"
    pipes = [line.replace("\t", "|") for line in (CONN_HEADER.split("\n", 1)[1], *CONN_RECORDS)]
    log.write_text("#separator \\x7c\n" + pipes[0] + "\n".join(pipes[1:]) + "\n")
    f = ZeekFollower(log)
    assert read_all(f) == GOOD_TSV and f.separator == "|" and not f.refused


@pytest.mark.parametrize("fmt", ["tsv", "json"])
def test_a_line_over_the_bound_is_refused_and_dropped_as_it_is_written(tmp_path, caplog, fmt):
    """A line of MAX_LINE bytes is read, one byte more is refused. A long line still being written is refused
    as soon as it passes the bound and dropped as it grows, also across a restart (the position says so),
    and the record after it is read."""
    log = tmp_path / "conn.log"
    head, good = (CONN_HEADER, CONN_RECORDS) if fmt == "tsv" else ("", CONN_JSON)
    uids = GOOD_TSV if fmt == "tsv" else GOOD_JSON
    first = len(head.splitlines()) + 1  # the first record's line
    at_bound, long = zeek_hostile.long_line(good[0], MAX_LINE), zeek_hostile.long_line(good[0], 4 * MAX_LINE)
    assert len(at_bound.encode()) == MAX_LINE
    log.write_text(head + good[0] + "\n" + at_bound + "\n" + long[:3 * MAX_LINE])
    f = ZeekFollower(log)
    with caplog.at_level(logging.WARNING, logger="fedsentry.agent"):
        assert read_all(f) == [uids[0], zeek_hostile.BAD_UID]
    assert f.refused == {"long": 1} and f.offset == log.stat().st_size and f.position["skipping"]
    (warning,) = warnings(caplog)
    assert f"{log}, line {first + 2}: a line longer than {MAX_LINE} bytes" in warning
    saved = json.loads(json.dumps(f.position))  # as the agent keeps it
    with log.open("a") as h:
        h.write(long[3 * MAX_LINE:] + "\n" + good[1] + "\n")
    restarted = ZeekFollower(log, saved)
    assert read_all(restarted) == [uids[1]] and not restarted.refused and restarted.line == first + 3
    assert read_all(f) == [uids[1]] and f.refused == {"long": 1} and not f.position["skipping"]


@pytest.mark.timeout(60)
def test_a_200_mb_line_is_never_held_whole(tmp_path):
    """The agent's peak resident memory (VmHWM) grows by less than 16 MiB reading a log with a 200 MB line
    (443 MB before); the records around it are read."""
    log = tmp_path / "conn.log"
    with log.open("wb") as out:
        out.write((CONN_JSON[0] + "\n").encode() + b'{"uid":"' + zeek_hostile.BAD_UID.encode() + b'","history":"')
        block = b"A" * (1 << 20)
        for _ in range(200):
            out.write(block)
        out.write(b'"}\n' + (CONN_JSON[1] + "\n").encode())
    follow = """if True:
        import json, sys
        from edge_agent.sources import ZeekFollower

        def peak():
            return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))

        f = ZeekFollower(sys.argv[1])
        before, uids, size = peak(), [], f.path.stat().st_size
        while f.offset < size:
            batch = f.poll()
            uids += [] if batch is None else list(batch.text["uid"])
        print(json.dumps({"grown_kib": peak() - before, "uids": uids, "refused": f.refused}))
        """
    done = subprocess.run([sys.executable, "-c", follow, str(log)], capture_output=True, text=True, timeout=50,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["uids"] == GOOD_JSON and got["refused"] == {"long": 1}
    assert got["grown_kib"] < 16 * 1024, got


@pytest.mark.parametrize("fmt", ["tsv", "json"])
def test_a_training_file_with_a_hostile_line_is_an_error_naming_the_file_and_line(tmp_path, fmt):
    from edge_agent.agent import training_source
    from edge_agent.sources import ZeekRecordError

    log = tmp_path / "conn.log"
    head, good, (_, bad, kind) = ((CONN_HEADER, CONN_RECORDS, TSV_CASES[0]) if fmt == "tsv" else
                                  ("", CONN_JSON, JSON_CASES[0]))
    for line, why in ((bad, kind), (zeek_hostile.long_line(good[0], 100 * MAX_LINE), "long")):
        log.write_text(head + good[0] + "\n" + line + "\n" + good[1] + "\n")
        with pytest.raises(ZeekRecordError) as e:
            list(training_source(str(log)))
        assert e.value.kind == why and str(e.value).startswith(f"{log}, line {len(head.splitlines()) + 2}: ")


def make_not_regular(path: Path, what: str) -> str:
    """Put something other than a regular file at `path`; the words its refusal uses."""
    if what == "dev-zero":
        path.symlink_to("/dev/zero")
        return "(/dev/zero) is a character device"
    if what == "fifo":
        os.mkfifo(path)
        return "is a FIFO"
    path.mkdir()
    return "is a directory"


NOT_REGULAR = ["dev-zero", "fifo", "directory"]


@pytest.mark.timeout(20)  # (reading a FIFO with no writer would block)
@pytest.mark.parametrize("what", NOT_REGULAR)
def test_a_path_that_is_not_a_regular_file_is_refused_at_start(tmp_path, capsys, what):
    from fedsentry.cli import main

    log = tmp_path / "conn.log"
    words = make_not_regular(log, what)
    with pytest.raises(NotRegularFileError) as e:
        ZeekFollower(log)
    assert str(e.value).startswith(str(log)) and words in str(e.value)
    assert main(["agent", "--id", "z1", "--broker", "mqtt://127.0.0.1:1", "--zeek", str(log), "--state-dir",
                 str(tmp_path / "state")]) == 2
    assert f"--zeek {log}: {log}" in capsys.readouterr().err


@pytest.mark.timeout(20)
@pytest.mark.parametrize("what", NOT_REGULAR)
def test_a_log_that_becomes_something_else_is_refused_and_the_position_kept(tmp_path, caplog, what):
    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + CONN_RECORDS[0] + "\n")
    f = ZeekFollower(log)
    assert read_all(f) == GOOD_TSV[:1]
    saved = f.position
    log.unlink()
    words = make_not_regular(log, what)
    with caplog.at_level(logging.WARNING, logger="fedsentry.agent"):
        assert f.poll() is None and f.poll() is None
    (error,) = warnings(caplog)  # once while it lasts
    assert f"zeek log refused: {log}" in error and words in error
    assert f.position == saved and f.refused == {"not_regular": 1}
    log.unlink() if what != "directory" else log.rmdir()
    log.write_text(CONN_HEADER + CONN_RECORDS[1] + "\n")  # a log again: read from its start
    assert read_all(f) == GOOD_TSV[1:2]


def start_agent(log: Path, state: Path, scores: Path, errors: Path) -> subprocess.Popen:
    with errors.open("a") as err:
        return subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "agent", "--id", "z1", "--broker",
                                 f"mqtt://127.0.0.1:{free_port()}", "--zeek", str(log), "--state-dir", str(state),
                                 "--scores-out", str(scores)], stdout=subprocess.DEVNULL, stderr=err)


def wait_for(condition, errors: Path, agent: subprocess.Popen, what: str, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end and agent.poll() is None:
        time.sleep(0.05)
    assert condition(), f"{what}; the agent's log:\n{errors.read_text()[-3000:]}"


def stop(agent: subprocess.Popen, errors: Path) -> None:
    os.kill(agent.pid, signal.SIGTERM)
    assert agent.wait(timeout=20) == 0, errors.read_text()[-3000:]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fmt", ["tsv", "json"])
def test_an_agent_on_a_live_log_scores_every_good_record_around_each_hostile_line_and_keeps_its_position(
        tmp_path, fmt):
    """`fedsentry agent --zeek` with a model: every hostile line appended while it follows the log is refused,
    every good record around them scored once; it keeps running, saves its position past lines it refused (with
    no record after them), does not read them again after a restart, and waits out a log become /dev/zero."""
    from edge_agent.store import AgentStore, Outbox
    from models.pca.detector import PCADetector
    from wire.model import model_envelope

    numeric = ["duration", "src_bytes", "dst_bytes", "src_pkts", "dst_pkts"]
    det = PCADetector(rank=1).fit(np.abs(np.random.default_rng(0).normal(100, 10, (200, 5))), numeric)
    state, scores, errors, log = tmp_path / "state", tmp_path / "scores.csv", tmp_path / "agent.err", tmp_path / "c"
    AgentStore(state).save_bytes("model.bin", model_envelope("j", 1, det).encode())  # scores from the start
    good = CONN_RECORDS if fmt == "tsv" else CONN_JSON
    cases = TSV_CASES if fmt == "tsv" else JSON_CASES
    log.write_text((CONN_HEADER if fmt == "tsv" else "") + good[0] + "\n")

    def scored() -> int:
        return len(scores.read_text().splitlines()) if scores.exists() else 0

    def saved() -> dict:
        return Outbox(state / "outbox.sqlite").load_state("source") or {}

    agent = start_agent(log, state, scores, errors)
    try:
        wait_for(lambda: scored() == 1, errors, agent, "the first record scored")
        hostile = [line for _, line, _ in cases] + [zeek_hostile.long_line(good[0], 3 * MAX_LINE)]
        if fmt == "tsv":
            hostile.append(zeek_hostile.separator_block(CONN_HEADER) + good[1] + "\n" + CONN_HEADER.rstrip("\n"))
        with log.open("a") as h:  # each one between two good records, written as Zeek writes: a line at a time
            for line in hostile:
                h.write(line + "\n")
                h.flush()
                h.write(good[1] + "\n")
        expected = 1 + len(hostile)
        wait_for(lambda: scored() == expected, errors, agent, "every good record scored")
        with log.open("a") as h:  # the log ends on refused lines: the position moves past them all the same
            h.write(cases[0][1] + "\n" + zeek_hostile.long_line(good[0]) + "\n")
        wait_for(lambda: saved().get("offset") == log.stat().st_size, errors, agent, "the position saved")
        assert agent.poll() is None
        stop(agent, errors)
        assert scored() == expected and saved()["line"] == len(log.read_text().splitlines())

        agent = start_agent(log, state, scores, errors)  # restarted: nothing read twice, nothing refused again
        with log.open("a") as h:
            h.write(good[1] + "\n")
        wait_for(lambda: scored() == expected + 1, errors, agent, "the record after the restart scored")
        # a record's score is written before its position is committed (with its alerts): wait for the commit
        wait_for(lambda: saved().get("offset") == log.stat().st_size, errors, agent, "the position saved again")
        at = saved()
        log.unlink()
        log.symlink_to("/dev/zero")  # the log becomes /dev/zero under the running agent
        wait_for(lambda: "(/dev/zero) is a character device" in errors.read_text(), errors, agent, "refused")
        time.sleep(1)
        assert agent.poll() is None and saved() == at
        stop(agent, errors)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    text = errors.read_text()
    assert "Traceback" not in text and text.count("(/dev/zero) is a character device") == 1
    kinds = {kind for _, _, kind in cases} | {"long"} | ({"separator", "header"} if fmt == "tsv" else set())
    for kind in kinds:  # each kind logged once, by the first agent (the second read no refused line)
        assert text.count(f"zeek record skipped ({kind};") == 1, kind
