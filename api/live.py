"""The live feed's reading of new alerts: every alert stored after the feed opened, each once, in the order the
coordinator received them, however many share one `received` time (one MQTT message of 300 alerts is stored with
one time: a feed that read `received >= last LIMIT 200` served the same 200 forever).

Progress is a keyset cursor over (received, id), read in pages; an alert committed late, with a `received` time
before the cursor (the coordinator stamps alerts when they arrive and commits them in batches), is caught by a
bounded look back over the last LATE seconds before the cursor, and `seen` keeps any alert from going out twice."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from fastapi import Request
from sqlalchemy import Select, select, tuple_
from sqlalchemy.orm import Session

from store.db import Alert

#: live feeds open at once, per API key and in all (each holds a connection and polls the database twice a second)
FEEDS_PER_KEY = 4
FEEDS_IN_ALL = 64
PAGE = 200
#: pages read per poll at most (a flood is sent over several polls, in order)
PAGES = 10
#: how far before the cursor a late commit is looked for, and how many such alerts one poll reads at most
LATE = timedelta(seconds=5)
LATE_ROWS = 500


class LiveFeed:
    def __init__(self, start: tuple[datetime, str]):
        self.cursor = start
        self.seen: dict[str, datetime] = {}  # alerts sent (or there before the feed opened) within the look-back

    @classmethod
    def open(cls, s: Session, now: datetime) -> LiveFeed:
        """A feed of what is stored from now on: it starts after the newest alert, and the alerts of the look-back
        window before it count as seen (they are not news)."""
        newest = s.execute(select(Alert.received, Alert.id).order_by(Alert.received.desc(), Alert.id.desc())
                           .limit(1)).first()
        feed = cls((newest[0], newest[1]) if newest else (now, ""))
        before = s.execute(feed._late(select(Alert.id, Alert.received)))
        feed.seen = {alert_id: received for alert_id, received in before}
        return feed

    def _late(self, q: Any) -> Any:
        """The last LATE seconds up to the cursor, newest first, at most LATE_ROWS alerts."""
        return (q.where(Alert.received >= self.cursor[0] - LATE,
                        tuple_(Alert.received, Alert.id) <= tuple_(*self.cursor))
                .order_by(Alert.received.desc(), Alert.id.desc()).limit(LATE_ROWS))

    def poll(self, s: Session, q: Select[Any]) -> list[Alert]:
        """The alerts to send now (the filter `q` applied), oldest first."""
        out: list[Alert] = []
        for _ in range(PAGES):
            rows = list(s.scalars(q.where(tuple_(Alert.received, Alert.id) > tuple_(*self.cursor))
                                  .order_by(Alert.received, Alert.id).limit(PAGE)))
            out += rows
            if rows:
                self.cursor = (rows[-1].received, rows[-1].id)
            if len(rows) < PAGE:
                break
        late = s.scalars(self._late(q))
        fresh = [a for a in [*out, *late] if a.id not in self.seen]
        fresh = list({a.id: a for a in fresh}.values())
        for a in fresh:
            self.seen[a.id] = a.received
        horizon = self.cursor[0] - 2 * LATE
        if len(self.seen) > 4 * (PAGE * PAGES + LATE_ROWS):
            self.seen = {k: t for k, t in self.seen.items() if t >= horizon}
        return sorted(fresh, key=lambda a: (a.received, a.id))


class LiveSlots:
    """How many live feeds are open, per key and in all."""

    def __init__(self, per_key: int = FEEDS_PER_KEY, in_all: int = FEEDS_IN_ALL):
        self.per_key, self.in_all = per_key, in_all
        self.open: Counter[str] = Counter()
        self.lock = threading.Lock()

    def take(self, key: str) -> str | None:
        """Open one for this key; why not (None: opened)."""
        with self.lock:
            if self.open[key] >= self.per_key:
                return (f"this key has {self.open[key]} live feeds open already (at most {self.per_key}): close one "
                        "(another dashboard tab?) and try again")
            if sum(self.open.values()) >= self.in_all:
                return f"{self.in_all} live feeds are open already, the most this server keeps: try again later"
            self.open[key] += 1
            return None

    def give(self, key: str) -> None:
        with self.lock:
            self.open[key] -= 1
            if self.open[key] <= 0:
                del self.open[key]


def live_slots(request: Request) -> LiveSlots:
    """The app's count of open feeds (api.app.create_app makes it)."""
    slots: LiveSlots = request.app.state.live_slots
    return slots
