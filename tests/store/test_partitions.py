"""PostgreSQL's alerts partitioned by day, opt-in (issue 27, point 7; store.partitions, `fedsentry db
partition-alerts`): the migrations leave alerts one table keyed by id; the command converts a database with alerts
keeping every one and its tallies, --undo makes it one table again, and each is refused by name where it cannot be
done (SQLite, the shape asked already, a database nobody answers), nothing changed. An alert delivered twice is
stored once in both shapes (one whose time was replaced by its receipt too); partitioned, an alert whose day has no
partition is kept in the default one, and moved into its day's when that is made; retention drops whole days where
alerts are partitioned and deletes rows where they are not, the tallies the counts read right."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import insert, select, text, update

from fedsentry.cli import main
from store import partitions, retention
from store.alerts import COLUMNS, alert_row, store_alerts
from store.db import Alert, Device, make_engine, migrate, session_factory, utcnow
from tests.coordinator.test_migrations import _to
from tests.store.test_rollup import _agree

NOW = utcnow().replace(microsecond=0)
TODAY = NOW.date()


@pytest.fixture
def engine(postgres_url):
    e = make_engine(postgres_url)
    yield e
    e.dispose()


@pytest.fixture
def plain(engine):
    """Sessions on the default schema: alerts one table."""
    migrate(engine)
    return session_factory(engine)


@pytest.fixture
def sessions(plain, engine):
    """Sessions on alerts partitioned by day (as `fedsentry db partition-alerts` leaves them)."""
    with engine.begin() as c:
        partitions.convert(c, NOW)
    return plain


@pytest.fixture(params=["one table", "partitioned"])
def either(request):
    return request.getfixturevalue("plain" if request.param == "one table" else "sessions")


def _row(ts: datetime, device: str = "cam-1", received: datetime | None = None, i: int | None = None) -> dict:
    """An alert as the coordinator makes it from an agent's message sent at `ts`, received at `received`."""
    m = {"id": f"a{i}" if i is not None else uuid.uuid4().hex, "ts": (ts - datetime(1970, 1, 1)).total_seconds(),
         "score": 5.0, "threshold": 3.0, "count": 3, "explanation": [], "flow": None, "incident": None}
    return alert_row(device, "job-1", 1, m, received or NOW)


def _where(s, alert_id: str) -> str:
    return s.execute(text("SELECT tableoid::regclass::text FROM alerts WHERE id = :i"), {"i": alert_id}).scalar_one()


def _dump(engine) -> tuple[list, list]:
    with engine.connect() as c:
        return (c.execute(text("SELECT * FROM alerts ORDER BY id")).all(),
                c.execute(text("SELECT * FROM alert_tallies WHERE alerts <> 0 ORDER BY 1, 2, 3, 4, 5, 6")).all())


def _key(engine) -> str:
    with engine.connect() as c:
        return c.execute(text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'alerts_pkey'")
                         ).scalar_one()


def test_the_migrations_leave_alerts_one_table(engine):
    """Up to the newest migration, down below 0020 and up again: alerts one table keyed by id, read and counted as
    before; going below 0020 with alerts partitioned is refused, naming the command that undoes it."""
    _to(engine, "head")
    with engine.connect() as c:
        assert not partitions.partitioned(c)
    assert _key(engine) == "PRIMARY KEY (id)"
    _to(engine, "0019", down=True)
    _to(engine, "head")
    sessions = session_factory(engine)
    with sessions.begin() as s:
        assert sum(store_alerts(s, [_row(NOW - timedelta(hours=5 * k)) for k in range(30)]).values()) == 30
        _agree(s, random.Random(0), windows=5)
    with engine.begin() as c:
        partitions.convert(c, NOW)
    with pytest.raises(RuntimeError, match="partition-alerts --undo"):
        _to(engine, "0019", down=True)


def test_the_command_partitions_a_database_with_alerts_and_undoes_it(engine, postgres_url, capsys):
    """Every alert kept, each in its day's partition (older than HISTORY_DAYS: the default one), the tallies the
    same and kept right by later inserts; asked twice, refused by name, nothing changed; --undo: one table keyed by
    id again, every alert and tally as before."""
    migrate(engine)
    rows = [_row(NOW - timedelta(hours=7 * i)) for i in range(150)]  # 44 days back
    rows.append(_row(datetime(2020, 2, 29, 12), device="cam-2"))  # older than HISTORY_DAYS: the default partition
    with engine.begin() as c:
        c.execute(insert(Alert.__table__), [{k: r[k] for k in COLUMNS} for r in rows])
        c.execute(update(Alert.__table__).where(Alert.id.in_([r["id"] for r in rows[::3]])).values(acknowledged=True))
    before = _dump(engine)
    assert len(before[0]) == 151 and before[1]
    assert main(["db", "partition-alerts", "--db", postgres_url]) == 0
    assert "151 alerts copied" in capsys.readouterr().err
    assert _dump(engine) == before
    with engine.connect() as c:
        assert partitions.partitioned(c)
        assert _where(c, rows[-1]["id"]) == partitions.DEFAULT
        assert all(_where(c, r["id"]) == partitions.name(r["ts"].date()) for r in rows[:-1])
        assert set(partitions.days(c)) >= {TODAY + timedelta(days=k) for k in range(partitions.AHEAD + 1)}
    assert _key(engine) == "PRIMARY KEY (id, ts)"
    assert main(["db", "partition-alerts", "--db", postgres_url]) == 2
    assert "alerts are already partitioned by day; nothing changed" in capsys.readouterr().err
    assert _dump(engine) == before
    assert main(["db", "partition-alerts", "--db", postgres_url, "--undo"]) == 0
    assert _dump(engine) == before
    assert _key(engine) == "PRIMARY KEY (id)"
    with engine.connect() as c:
        assert not partitions.partitioned(c)
    assert main(["db", "partition-alerts", "--db", postgres_url, "--undo"]) == 2
    assert "alerts are not partitioned; nothing changed" in capsys.readouterr().err
    assert main(["db", "partition-alerts", "--db", postgres_url]) == 0
    assert _dump(engine) == before
    sessions = session_factory(engine)
    with sessions.begin() as s:  # stored as ingestion does, on the table made again: its key and its tally triggers
        fresh = store_alerts(s, rows[:10] + [_row(NOW - timedelta(minutes=k)) for k in range(5)])
        assert sum(fresh.values()) == 5
        _agree(s, random.Random(1), windows=5)


@pytest.mark.parametrize("url, says", [
    ("sqlite:///{tmp}/f.db", "alerts are partitioned on PostgreSQL only (--db is sqlite); nothing changed"),
    ("postgresql://postgres@127.0.0.1:1/x", "cannot reach the database: connection failed"),
])
def test_the_command_refuses_a_database_it_cannot_partition(url, says, tmp_path, capsys):
    assert main(["db", "partition-alerts", "--db", url.format(tmp=tmp_path)]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "f.db").exists()


def test_a_redelivered_alert_is_stored_once(either):
    """The same alert again, in another batch: the same id at the same time, skipped by the key (id; partitioned
    (id, ts), in a day's partition as in the default one). A device clock an hour ahead: its alert is stored at its
    receipt, and delivered again later (still ahead, then no longer) it has another time: skipped all the same."""
    sessions = either
    sent = [NOW - timedelta(minutes=7 * k) for k in range(20)] + [datetime(2001, 1, 1)]
    ahead = NOW + timedelta(hours=1)
    first = [_row(t, i=k) for k, t in enumerate(sent)] + [_row(ahead, i=99)]
    assert first[-1]["ts"] == NOW  # (stored at its receipt)
    with sessions.begin() as s:
        assert store_alerts(s, first)["cam-1"] == 22
    for received in (NOW + timedelta(seconds=30), ahead + timedelta(minutes=10)):
        again = [_row(t, i=k, received=received) for k, t in enumerate(sent)] + [_row(ahead, i=99, received=received)]
        with sessions.begin() as s:
            assert store_alerts(s, again) == {}
    with sessions() as s:
        assert s.scalars(select(Alert.id).order_by(Alert.id)).all() == sorted(r["id"] for r in first)
        if partitions.partitioned(s.connection()):
            assert _where(s, "a20") == partitions.DEFAULT and _where(s, "a0") == partitions.name(NOW.date())
        assert s.get(Device, "cam-1").alerts == 22 * 3
        _agree(s, random.Random(2), windows=5)


def test_an_alert_no_partition_covers_is_kept_in_the_default_one(sessions):
    """Far in the past (a device clock years behind) or ahead of the partitions made: kept in the default partition,
    read and counted as any other; when its day's partition is made it moves there, counted once."""
    past = _row(datetime(2001, 9, 9, 1, 46, 40))
    future = _row(NOW - timedelta(minutes=1))
    future["ts"] = NOW + timedelta(days=partitions.AHEAD + 30)  # (no agent's alert gets past alert_row so far ahead)
    here = _row(NOW)
    with sessions.begin() as s:
        assert store_alerts(s, [past, future, here])["cam-1"] == 3
    with sessions.begin() as s:
        assert {_where(s, r["id"]) for r in (past, future)} == {partitions.DEFAULT}
        assert s.get(Alert, future["id"]).ts == future["ts"]
        _agree(s, random.Random(3), windows=5)
        assert partitions.make_days(s.connection(), future["ts"].date(), future["ts"].date()) == [future["ts"].date()]
    with sessions() as s:
        assert _where(s, future["id"]) == partitions.name(future["ts"].date())
        assert _where(s, past["id"]) == partitions.DEFAULT
        assert len(s.scalars(select(Alert.id)).all()) == 3
        _agree(s, random.Random(4), windows=5)


def test_retention_drops_whole_days_and_keeps_the_rest(sessions):
    """Ten days of alerts in their partitions (and one in the default partition): a cutoff five and a half days
    back drops the partitions of the days wholly before it, deletes the older alerts of the day it falls in and of
    the default partition, keeps every later one and the partitions ahead; the tallies hold what is left."""
    first = TODAY - timedelta(days=10)
    with sessions.begin() as s:
        partitions.make_days(s.connection(), first, TODAY)
    rows = [_row(NOW - timedelta(hours=3 * k, minutes=k), device=f"cam-{k % 3}") for k in range(80)]
    rows.append(_row(datetime(2001, 1, 1)))
    with sessions.begin() as s:
        store_alerts(s, rows)
    cutoff = datetime.combine(TODAY, datetime.min.time()) - timedelta(days=5, hours=12)
    p = retention.maintain(sessions, NOW, cutoff)
    gone = [first + timedelta(days=k) for k in range((cutoff.date() - first).days)]
    assert p.dropped == gone and p.made == []
    assert p.alerts == 1 + sum(r["ts"].date() == cutoff.date() and r["ts"] < cutoff for r in rows)
    with sessions() as s:
        left = set(partitions.days(s.connection()))
        assert not left & set(gone)
        assert left >= {cutoff.date() + timedelta(days=k)
                         for k in range((TODAY - cutoff.date()).days + partitions.AHEAD + 1)}
        assert set(s.scalars(select(Alert.id))) == {r["id"] for r in rows if r["ts"] >= cutoff}
        _agree(s, random.Random(5))


def test_retention_deletes_rows_of_one_table(plain):
    """Alerts one table: nothing made nor dropped, every alert older than the cutoff deleted as a row, the rest
    kept, the tallies right."""
    rows = [_row(NOW - timedelta(hours=3 * k, minutes=k), device=f"cam-{k % 3}") for k in range(80)]
    with plain.begin() as s:
        store_alerts(s, rows)
    cutoff = NOW - timedelta(days=5, hours=12)
    p = retention.maintain(plain, NOW, cutoff)
    assert p.made == [] and p.dropped == [] and p.alerts == sum(r["ts"] < cutoff for r in rows) > 0
    with plain() as s:
        assert not partitions.partitioned(s.connection())
        assert set(s.scalars(select(Alert.id))) == {r["id"] for r in rows if r["ts"] >= cutoff}
        _agree(s, random.Random(6))


def test_the_partitions_ahead_are_made_once(sessions):
    """Converting made today's and AHEAD days after; a day past those, the next AHEAD + 1 are made, once."""
    later = NOW + timedelta(days=partitions.AHEAD + 1)
    with sessions.begin() as s:
        assert partitions.make_ahead(s.connection(), later) == [
            later.date() + timedelta(days=k) for k in range(partitions.AHEAD + 1)]
        assert partitions.make_ahead(s.connection(), later) == []
