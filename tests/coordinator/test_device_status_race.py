"""Coordinators sharing a database (issue 27) may both see a new device's first status: the second write waits for
the first and updates the row, instead of failing on the device's key (seen when a standby driver and the leader
both heard a device come online)."""

from __future__ import annotations

import threading
import time

from coordinator.service import Coordinator
from store.db import Device


def test_two_coordinators_write_a_new_devices_first_status_at_once(postgres_url):
    a = Coordinator("mqtt://127.0.0.1:9", postgres_url)  # never started: statuses are handed to them directly
    b = Coordinator("mqtt://127.0.0.1:9", postgres_url)
    errors: list[BaseException] = []
    try:
        with a.sessions.begin() as s:  # a has written the device and not committed yet
            s.add(Device(id="dev-new", online=True))
            s.flush()

            def second() -> None:
                try:
                    b.statuses.write("dev-new", True, {"job": "j", "version": 1, "status": "loaded"})
                except BaseException as e:  # reported by the assertion below
                    errors.append(e)

            t = threading.Thread(target=second)
            t.start()
            time.sleep(0.5)  # b's write waits for a's row
        t.join(10)
        assert not errors, errors
        with b.sessions() as s:
            dev = s.get(Device, "dev-new")
            assert dev.online and dev.model_status == {"job": "j", "version": 1, "status": "loaded"}
    finally:
        for c in (a, b):
            c.locks.close()
            c.engine.dispose()
