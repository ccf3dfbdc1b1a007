"""Devices' status messages (presence, capabilities, model status), kept apart from alerts and uploads.

A device may publish on its status topic as often as it likes (at QoS 0 the broker does not even wait for our
acknowledgements). Each device's newest status supersedes its older ones, so only that one is kept: memory is
one message per device whatever a device sends, and a superseded message is acknowledged unhandled. The worker
handles alerts and uploads first and statuses in between (`take`), so a flood of statuses never delays another
device's alerts; a status is written to the database only when it changes what is stored (coordinator.status).
A `Presence` belongs to one connection: its acknowledgements are that connection's."""

from __future__ import annotations

import threading
from collections.abc import Callable

#: under a flood of alerts, PRESENCE_BATCH statuses are handled every PRESENCE_EVERY messages
PRESENCE_EVERY, PRESENCE_BATCH = 200, 20


class Presence:
    def __init__(self, ack: Callable[[int, int], object]):
        self.ack = ack
        self.latest: dict[str, tuple[str, bytes, int, int]] = {}  # device -> its newest status message
        self.lock = threading.Lock()
        self.superseded = 0

    def put(self, device: str, message: tuple[str, bytes, int, int]) -> None:
        with self.lock:
            old = self.latest.pop(device, None)
            self.latest[device] = message  # (re)inserted last: devices are served in the order they last spoke
        if old is not None:
            self.superseded += 1
            self.ack(old[2], old[3])

    def waiting(self) -> bool:
        return bool(self.latest)

    def take(self, n: int) -> list[tuple[str, bytes, int, int]]:
        """Up to n devices' newest statuses, oldest first."""
        with self.lock:
            devices = list(self.latest)[:n]
            return [self.latest.pop(d) for d in devices]


def status_sender(topic: str) -> str | None:
    """The device of a status topic (``.../agents/<id>/status``), else None (checked again when handled)."""
    head, _, what = topic.rpartition("/")
    return head.rpartition("/")[2] if what == "status" else None
