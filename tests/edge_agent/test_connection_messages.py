"""An agent that cannot use its broker says so, with the broker's address and the cause, within seconds
(issue 28): nothing listening, credentials refused (with what to do), and it says it once, not on every retry."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from coordinator.broker import Mosquitto, free_port
from edge_agent.agent import Agent, AgentConfig
from tests.integration.conftest import HAVE_MOSQUITTO


def run_until_logged(caplog, cfg: AgentConfig, needle: str, timeout: float = 8.0) -> list[str]:
    caplog.set_level(logging.ERROR, logger="fedsentry.agent")
    agent = Agent(cfg)
    t = threading.Thread(target=agent.run, daemon=True)
    t0 = time.monotonic()
    t.start()
    try:
        while time.monotonic() - t0 < timeout and not any(needle in r.getMessage() for r in caplog.records):
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        time.sleep(2.5)  # paho retries meanwhile: the same reason is not logged again
    finally:
        agent.stop.set()
        t.join(10)
    lines = [r.getMessage() for r in caplog.records if r.name == "fedsentry.agent" and r.levelno >= logging.ERROR]
    assert any(needle in m for m in lines), lines
    assert seconds < 5, seconds
    return lines


@pytest.mark.alone  # a wall-clock bound
def test_nothing_listening_is_named_with_the_address(tmp_path, caplog):
    port = free_port()
    lines = run_until_logged(caplog, AgentConfig("dev-x", f"mqtt://127.0.0.1:{port}", str(tmp_path / "s")),
                             "connection refused")
    assert f"mqtt://127.0.0.1:{port}" in lines[0] and "wrong --broker port" in lines[0]
    assert len(lines) == 1, lines


@pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed (.ci/run installs it)")
@pytest.mark.alone  # a wall-clock bound
def test_refused_credentials_say_how_to_enrol(tmp_path, caplog):
    port = free_port()
    broker = Mosquitto(port=port, config=f"listener {port} 127.0.0.1\nallow_anonymous false\n").start()
    try:
        lines = run_until_logged(caplog, AgentConfig("dev-y", f"mqtt://127.0.0.1:{port}", str(tmp_path / "s"),
                                                     username="dev-y", password="wrong"), "refused the connection")
    finally:
        broker.close()
    assert "Not authorized" in lines[0] and "--enrol" in lines[0] and "--mqtt-password-file" in lines[0]
    assert "wrong" not in lines[0]  # never the password
    assert len(lines) == 1, lines
