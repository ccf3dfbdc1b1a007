"""The private Mosquitto tests and benchmarks start: a port taken between choosing and binding it (by tests
running beside other load) must not leave a test talking to somebody else's listener."""

from __future__ import annotations

import socket

import pytest

from coordinator.broker import Mosquitto
from tests.integration.conftest import HAVE_MOSQUITTO

pytestmark = pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed (.ci/run installs it)")


def test_a_port_taken_before_mosquitto_binds_it_is_chosen_again_and_kept_on_restart():
    broker = Mosquitto()
    taken = broker.port
    with socket.socket() as thief:  # another process listens on the chosen port first
        thief.bind(("127.0.0.1", taken))
        thief.listen()
        try:
            broker.start()
            assert broker.port != taken and broker.url.endswith(f":{broker.port}")
            assert broker.proc is not None and broker.proc.poll() is None  # ours runs, on its own port
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
                pass
            broker.stop()
            broker.start()
            assert broker.proc.poll() is None and broker.port != taken  # clients find it where it was
        finally:
            broker.close()


def test_a_port_asked_for_that_is_taken_is_an_error_naming_mosquittos_words():
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", 0))
        thief.listen()
        broker = Mosquitto(port=thief.getsockname()[1])
        with pytest.raises(RuntimeError, match="mosquitto did not start"):
            broker.start()
        broker.close()


def test_a_slow_mosquitto_that_lost_its_port_is_not_taken_for_the_listener_there(tmp_path):
    """Under load Mosquitto can take longer to exit than any fixed pause after the port answers: the port answering
    (the other process's listener) must not count as our broker running."""
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", 0))
        thief.listen()
        broker = Mosquitto(port=thief.getsockname()[1])
        slow = tmp_path / "slow-mosquitto"
        slow.write_text(f"#!/bin/sh\nsleep 0.5\nexec {broker.binary} \"$@\"\n")
        slow.chmod(0o755)
        broker.binary = str(slow)
        with pytest.raises(RuntimeError, match="Address already in use"):
            broker.start()
        broker.close()
