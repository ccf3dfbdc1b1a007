"""False-positive feedback between the database and the devices (store.feedback, wire.feedback): each device whose
feedback changed is sent the whole list in force, retained on its own feedback topic (so that a device that
restarts, or was offline, gets it from the broker); the effect a device reports in its status is written onto
its actions when it changes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from store import feedback
from wire.feedback import feedback_topic, read_report
from wire.messages import envelope

log = logging.getLogger("fedsentry.coordinator")


def publish_feedback(sessions: sessionmaker[Session], publish: Callable[[str, bytes, bool], None]) -> int:
    """Send every device whose feedback changed its list in force; how many devices were sent one."""
    with sessions.begin() as s:
        devices = feedback.unpublished(s)
        for device in devices:
            msg = feedback.device_feedback(s, device)
            publish(feedback_topic(device), envelope(msg, "", 0, "coordinator").encode(), True)
            log.info("feedback: %d actions (%d records) sent to %s", len(msg.actions), len(msg.scores), device)
    return len(devices)


class Reports:
    """The effects devices report in their status messages, written when a device's report changes."""

    def __init__(self, sessions: sessionmaker[Session]):
        self.sessions = sessions
        self.last: dict[str, dict[str, Any]] = {}

    def take(self, device: str, meta: Any) -> None:
        report = read_report(meta)
        if report is None or self.last.get(device) == report:
            return
        with self.sessions.begin() as s:
            feedback.record_effect(s, device, report)
        self.last[device] = report
