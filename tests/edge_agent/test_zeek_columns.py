"""A Zeek TSV record must have as many columns as its log's #fields line names. A training file with one
that does not is refused, naming the file, the line and both counts (before, it loaded with every number
unset); a followed log skips it with a warning and goes on (a sensor that crashed mid-line and started again
leaves such a record), and a partial last line still waits until it is complete."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from coordinator.broker import free_port
from edge_agent.sources import ZeekFollower, ZeekLineError
from tests.edge_agent.test_sources_scorer import CONN_HEADER, CONN_RECORDS

HEADER_LINES = CONN_HEADER.count("\n")  # 8: the first record is on line 9
FIELDS = len(CONN_RECORDS[0].split("\t"))  # 21


def cut(record: str, keep: int) -> str:
    return "\t".join(record.split("\t")[:keep])


def uids(batch) -> list[str]:
    return [] if batch is None else list(batch.text["uid"])


@pytest.mark.parametrize(("bad", "found"), [(cut(CONN_RECORDS[1], 18), 18), (CONN_RECORDS[1] + "\tx", 22)],
                         ids=["short", "long"])
def test_a_training_file_with_a_record_of_the_wrong_width_is_refused(tmp_path, bad, found):
    from edge_agent.agent import training_source

    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + CONN_RECORDS[0] + "\n" + bad + "\n" + CONN_RECORDS[2] + "\n")
    with pytest.raises(ZeekLineError) as e:
        list(training_source(str(log)))
    assert (e.value.line, e.value.found, e.value.expected) == (HEADER_LINES + 2, found, FIELDS)
    message = str(e.value)
    assert message.startswith(f"{log}, line {HEADER_LINES + 2}: {found} columns where the #fields line names "
                              f"{FIELDS}")


@pytest.mark.timeout(30)  # were the file accepted, the agent would go on to run
def test_the_agent_refuses_such_a_training_file(tmp_path, capsys):
    from fedsentry.cli import main

    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + "".join(r + "\n" for r in CONN_RECORDS[:2]) + cut(CONN_RECORDS[2], 5) + "\n")
    assert main(["agent", "--id", "t1", "--broker", "mqtt://127.0.0.1:1", "--train", str(log),
                 "--state-dir", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err
    assert f"--train {log}: {log}, line {HEADER_LINES + 3}: 5 columns where the #fields line names {FIELDS}" in err


def test_a_followed_log_skips_a_bad_record_with_a_warning_and_goes_on(tmp_path, caplog):
    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + CONN_RECORDS[0] + "\n" + cut(CONN_RECORDS[1], 3) + "\n" + CONN_RECORDS[2] + "\n")
    f = ZeekFollower(log)
    with caplog.at_level(logging.WARNING, logger="fedsentry.agent"):
        assert uids(f.poll()) == ["CHhAvVGS1DHFjwGM9", "CtPZjS20MLrsMUOJi2"]
    assert f.malformed == 1
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"{log}, line {HEADER_LINES + 2}: 3 columns where the #fields line names {FIELDS}" in warning
    # a partial last line is Zeek still writing: it waits, and is no error
    torn = CONN_RECORDS[1][:40]
    with log.open("a") as h:
        h.write(torn)
    assert f.poll() is None and f.malformed == 1
    # the sensor crashed mid-line and started again: the torn start and the next record make one bad line
    with log.open("a") as h:
        h.write(CONN_RECORDS[1] + "\n" + CONN_RECORDS[0] + "\n")
    assert uids(f.poll()) == ["CHhAvVGS1DHFjwGM9"] and f.malformed == 2 and f.line == HEADER_LINES + 5
    assert len(caplog.records) == 1  # counted; a warning the first time of its kind, then every 1000th


def test_line_numbers_survive_a_restart_and_old_saved_positions(tmp_path, caplog):
    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + "".join(r + "\n" for r in CONN_RECORDS))
    f = ZeekFollower(log)
    f.poll()
    saved = json.loads(json.dumps(f.position))  # as the agent persists it
    older = {k: v for k, v in saved.items() if k != "line"}  # saved by an agent before line numbers
    with log.open("a") as h:
        h.write(cut(CONN_RECORDS[0], 2) + "\n")
    for position in (saved, older):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fedsentry.agent"):
            assert ZeekFollower(log, position).poll() is None
        assert f"line {HEADER_LINES + 4}: 2 columns" in caplog.records[-1].getMessage()


def test_a_running_agent_following_a_log_with_a_bad_record_keeps_running(tmp_path):
    """`fedsentry agent --zeek`: the warning is logged, the agent goes on, and stops cleanly on SIGTERM."""
    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + CONN_RECORDS[0] + "\n" + cut(CONN_RECORDS[1], 7) + "\n")
    errors = tmp_path / "agent.err"
    with errors.open("w") as err:
        agent = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "agent", "--id", "z1", "--broker",
                                  f"mqtt://127.0.0.1:{free_port()}", "--zeek", str(log), "--state-dir",
                                  str(tmp_path / "state")], stdout=subprocess.DEVNULL, stderr=err)
    try:
        expected = f"{log}, line {HEADER_LINES + 2}: 7 columns"
        end = time.monotonic() + 30
        while expected not in errors.read_text() and time.monotonic() < end and agent.poll() is None:
            time.sleep(0.1)
        assert expected in errors.read_text(), errors.read_text()
        with log.open("a") as h:  # more traffic after the bad record
            h.write(CONN_RECORDS[2] + "\n")
        time.sleep(1)
        assert agent.poll() is None, errors.read_text()
        os.kill(agent.pid, signal.SIGTERM)
        assert agent.wait(timeout=20) == 0, errors.read_text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert "Traceback" not in errors.read_text()
    from edge_agent.store import Outbox

    position = Outbox(tmp_path / "state" / "outbox.sqlite").load_state("source")  # read past the bad record
    assert position["offset"] == log.stat().st_size and position["line"] == HEADER_LINES + 3
