"""Keyset pagination before grouping (issue 24, point 6): a page of incidents, the latest update first, is found by
reading incident updates newest first from where the page starts (the time index), a batch at a time, and grouping
only the incidents met, instead of grouping every incident and sorting them for each page.

An incident's latest update under the filter is the first of its updates met, so once updates down to a time are
read, every incident whose latest update is at or after that time is known: enough of them make the page."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.db import Alert
from store.rollup import Filter


def latest_first(session: Session, f: Filter, upper: datetime | None, k: int) -> tuple[set[str], datetime | None]:
    """The incidents of the `k` newest updates `f` selects at or before `upper` (and of every update at the time of
    the last of them), and that time: every incident whose latest update is at or after it is among them. None for
    the time: no update older is left."""
    q = f.apply(select(Alert.ts, Alert.incident_id).where(Alert.incident_id.is_not(None)))
    if upper is not None:
        q = q.where(Alert.ts <= upper)
    rows = session.execute(q.order_by(Alert.ts.desc()).limit(k)).all()
    found = {i for _, i in rows}
    if len(rows) < k:
        return found, None
    end = rows[-1][0]
    found.update(session.scalars(q.with_only_columns(Alert.incident_id).where(Alert.ts == end)))
    return found, end
