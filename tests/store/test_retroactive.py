"""A retroactive suppression rule is applied after it is made, a batch a transaction (issue 24, points 2 and 5):
one transaction over a month of alerts took minutes and held the roll-up rows ingestion writes too. Each batch
commits on its own, a stopped server's rule is finished where it stopped, nothing is counted twice, and a rule
removed half-way stops there. On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from store import suppress
from store.alerts import alert_row, store_alerts
from store.db import Alert, FlaggedRecord, SuppressedAlert, Suppression, make_engine, migrate, session_factory, utcnow

NOW = utcnow()


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/r.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    migrate(engine)
    monkeypatch.setattr(suppress, "RETRO_BATCH", 7)
    yield session_factory(engine)
    engine.dispose()


def _store(sessions, n: int) -> tuple[int, int]:
    """n single alerts and one incident update with n records, every third of each from 10.1.0.0/16; how many
    alerts and records the rule below matches."""
    rows = []
    for i in range(n):
        a = {"id": uuid.uuid4().hex, "ts": (NOW - timedelta(hours=i)).timestamp(), "score": 5.0, "threshold": 3.0,
             "count": 1, "explanation": [], "flow": {"id.orig_h": f"10.{1 if i % 3 == 0 else 2}.0.{i % 250}"},
             "incident": None}
        rows.append(alert_row("cam-1", "job-1", 1, a, utcnow()))
    records = [{"ts": NOW.timestamp() - 60 + i * 0.1, "score": 5.0, "explanation": [],
                "flow": {"uid": f"C{i}", "id.orig_h": f"10.{1 if i % 3 == 0 else 2}.0.9"}} for i in range(n)]
    update = {"id": uuid.uuid4().hex, "ts": NOW.timestamp() - 1, "score": 9.0, "threshold": 3.0, "count": n,
              "summary": True, "explanation": [], "flow": None, "records": records,
              "incident": {"key": "x", "window": NOW.timestamp() - 120, "first": NOW.timestamp() - 60,
                           "last": NOW.timestamp() - 1, "samples": []}}
    rows.append(alert_row("cam-1", "job-1", 1, update, utcnow()))
    with sessions.begin() as s:
        store_alerts(s, rows)
    third = len(range(0, n, 3))
    return third, third


def _rule(sessions) -> str:
    with sessions.begin() as s:
        return suppress.create(s, suppress.Match(cidr="10.1.0.0/16"), "our scanner", "alice", retroactive=True).id


def _held(sessions, rule: str) -> tuple[int, int, int]:
    with sessions() as s:
        def count(table, *where) -> int:
            return s.scalar(select(func.count()).select_from(table).where(*where))
        return (count(SuppressedAlert, SuppressedAlert.suppression_id == rule),
                count(FlaggedRecord, FlaggedRecord.suppression_id == rule), count(Alert))


def test_each_batch_commits_on_its_own_and_the_count_is_exact(sessions, monkeypatch):
    alerts, records = _store(sessions, 60)
    rule = _rule(sessions)
    seen: list[tuple[int, int, int]] = []
    step = suppress.step

    def watched(session, r):  # what another connection sees before each batch: the earlier ones, committed
        seen.append(_held(sessions, rule))
        step(session, r)

    monkeypatch.setattr(suppress, "step", watched)
    assert suppress.apply_retroactive(sessions, rule) == alerts + records
    assert len(seen) >= 60 // 7 + 60 // 7  # a batch at a time, alerts then records
    moved = [a for a, _, _ in seen]
    assert moved == sorted(moved) and any(0 < a < alerts for a in moved)  # committed as it went
    assert _held(sessions, rule) == (alerts, records, 61 - alerts)
    with sessions() as s:
        r = s.get(Suppression, rule)
        assert (r.retro_state, r.retro_cursor, r.retroactive) == ("done", None, alerts + records)


def test_a_stopped_application_is_finished_where_it_stopped_and_counted_once(sessions):
    alerts, records = _store(sessions, 60)
    rule = _rule(sessions)
    for _ in range(5):  # the server stopped after five batches
        with sessions.begin() as s:
            suppress.step(s, s.get(Suppression, rule))
    with sessions() as s:
        assert s.get(Suppression, rule).retro_state == "running"
    assert suppress.resume_retroactive(sessions) == 1
    assert _held(sessions, rule)[:2] == (alerts, records)
    assert suppress.apply_retroactive(sessions, rule) == alerts + records  # done: nothing more, nothing twice
    assert suppress.resume_retroactive(sessions) == 0


def test_a_rule_removed_half_way_stops_there(sessions):
    _store(sessions, 60)
    rule = _rule(sessions)
    with sessions.begin() as s:
        suppress.step(s, s.get(Suppression, rule))
        suppress.remove(s, rule, "bob")
    before = _held(sessions, rule)
    suppress.apply_retroactive(sessions, rule)
    assert _held(sessions, rule) == before and suppress.resume_retroactive(sessions) == 0
