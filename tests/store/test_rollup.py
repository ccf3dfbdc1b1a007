"""The roll-ups (alert_tallies, issue 24 point 6) answer exactly what the alerts table does: on random alerts and
random windows and filters, the counts, the series and the per-device chart read through the tallies equal those
read from alerts alone, on SQLite and PostgreSQL, after ingestion (a redelivery too), acknowledgements taken and
taken back, a retroactive suppression, retention and deletion; and the tallies equal the alerts added up afresh.
Pages of incidents found newest update first (store.keyset) are those grouping every incident gives."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import delete, func, literal_column, select, text

from store.alerts import alert_row, store_alerts
from store.db import Alert, AlertBand, AlertTally, make_engine, migrate, session_factory, utcnow
from store.rollup import BANDS, DAY, HOUR, band_sql, pieces
from store.suppress import Match, apply_retroactive, create
from store.triage import (
    AlertFilter,
    acknowledge,
    flagged_counts,
    flagged_series,
    incidents,
    records_per_device,
    unacknowledge,
)

#: noon yesterday: the alerts lie in the 6 days before it, within a retroactive rule's 30 days whenever this runs
NOW = utcnow().replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
DEVICES = ("cam-1", "cam-2", "cam_3", "gw-1", "sensor-1")


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request, tmp_path):
    url = f"sqlite:///{tmp_path}/r.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    migrate(engine)
    yield session_factory(engine)
    engine.dispose()


def _time(rng: random.Random) -> datetime:
    """Anywhere in the 6 days before NOW, a third of them on or just before an hour or a day boundary."""
    t = NOW - timedelta(seconds=rng.uniform(0, 6 * 86400))
    edge = rng.random()
    if edge < 0.15:
        t = t.replace(minute=0, second=0, microsecond=0)
    elif edge < 0.3:
        t = t.replace(minute=59, second=59, microsecond=999999)
    elif edge < 0.35:
        t = t.replace(hour=23, minute=59, second=59, microsecond=999999)
    return t


def _alerts(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        device = rng.choice(DEVICES)
        incident = None
        if rng.random() < 0.3:
            window = 1.79e9 + rng.randrange(4) * 60
            incident = {"key": rng.choice(("a+b", "c")), "window": window, "first": window + 1, "last": window + 2}
        m = {"id": f"a{i}-{rng.getrandbits(32):x}", "ts": 1.79e9, "score": _score(rng), "threshold": 3.0,
             "count": rng.randint(2, 50) if incident else 1, "explanation": [], "flow": {"uid": f"C{i}"},
             "incident": incident}
        row = alert_row(device, rng.choice(("j1", "j2")), 1, m, NOW)
        row["ts"] = _time(rng)
        rows.append(row)
    return rows


#: minimum scores besides the alerts' own: band edges (store.rollup.BANDS a unit of log2(1 + |x|)), 0, negative, huge
EDGES = (0.0, 2 ** (1 / BANDS) - 1, 1.0, 2 ** (65 / BANDS) - 1, 3.0, 2 ** (80 / BANDS) - 1, 6.0, -1.0,
         1 - 2 ** (3 / BANDS), 1e300, -1e300, 1.7e308, -1.7e308)


def _score(rng: random.Random) -> float:
    """Mostly between 3 and 9; some on band edges, 0, negative, huge."""
    r = rng.random()
    if r < 0.8:
        return rng.uniform(3, 9)
    if r < 0.9:
        return rng.choice(EDGES)
    return rng.choice((rng.uniform(-5, 1), rng.uniform(1e10, 1e300), -rng.uniform(1e10, 1e300)))


def _filter(rng: random.Random, ids: list[str], scores: list[float] = ()) -> AlertFilter:
    def when() -> datetime | None:
        r = rng.random()
        t = NOW - timedelta(seconds=rng.uniform(-3600, 7 * 86400))
        if r < 0.15:
            return None
        if r < 0.35:
            return t.replace(minute=0, second=0, microsecond=0)
        if r < 0.5:
            return t.replace(hour=0, minute=0, second=0, microsecond=0)
        return t

    since, until = when(), when()
    if since and until and since >= until:
        since, until = (until, since) if until < since else (since, None)
    pick = rng.random()
    return AlertFilter(device=rng.choice(DEVICES) if pick < 0.15 else None,
                       device_prefix=rng.choice(("cam-", "cam_", "gw")) if 0.15 <= pick < 0.3 else None,
                       job="j1" if 0.3 <= pick < 0.4 else None, since=since, until=until,
                       min_score=_min_score(rng, scores) if 0.4 <= pick < 0.45 or rng.random() < 0.3 else None,
                       acknowledged=rng.choice((True, False)) if 0.45 <= pick < 0.6 else None,
                       incident=rng.choice(ids) if 0.6 <= pick < 0.65 and ids else None)


def _min_score(rng: random.Random, scores: list[float]) -> float:
    """A stored alert's own score (the band's alerts at the score count), a band edge, or any."""
    r = rng.random()
    if r < 0.4 and scores:
        return rng.choice(scores)
    return rng.choice(EDGES) if r < 0.7 else rng.uniform(2.5, 9.5)


def _agree(s, rng: random.Random, windows: int = 25) -> None:
    """Every answer read through the tallies equals the direct one, and the tallies (their tops too) and the bands
    the alerts added up afresh."""
    ids = [i for i in s.scalars(select(Alert.incident_id).where(Alert.incident_id.is_not(None)).distinct())]
    scores = list(s.scalars(select(Alert.score)))
    for _ in range(windows):
        f = _filter(rng, ids, scores)
        assert records_per_device(s, f) == records_per_device(s, f, rollups=False), f
        f = replace(f, until=f.until or NOW + timedelta(hours=1))  # the counts' default end is the clock's
        buckets = rng.choice((2, 7, 24, 48, 200))
        assert flagged_counts(s, f, buckets) == flagged_counts(s, f, buckets, rollups=False), f
        assert flagged_series(s, f, buckets) == flagged_series(s, f, buckets, rollups=False), f
    fresh: dict[tuple, tuple] = {}
    bands: dict[tuple, tuple[int, int]] = {}
    band = literal_column(band_sql("alerts.score"))  # as the database puts a score in a band
    for a, b in s.execute(select(Alert, band)):
        for span in (HOUR, DAY):
            start = (a.ts - datetime(1970, 1, 1)) // timedelta(seconds=span) * span
            key = (span, start, a.device_id, a.job_id, a.incident_id or "", bool(a.acknowledged))
            alerts, records, top = fresh.get(key, (0, 0, a.score))
            fresh[key] = (alerts + 1, records + a.count, max(top, a.score))
            key = (span, start, a.job_id, bool(a.acknowledged), b)
            alerts, records = bands.get(key, (0, 0))
            bands[key] = (alerts + 1, records + a.count)
    kept = {(t.span, t.start, t.device_id, t.job_id, t.incident_id, bool(t.acknowledged)): (t.alerts, t.records, t.top)
            for t in s.scalars(select(AlertTally)) if t.alerts or t.records}
    assert kept == fresh
    assert {(b.span, b.start, b.job_id, bool(b.acknowledged), b.band): (b.alerts, b.records)
            for b in s.scalars(select(AlertBand)) if b.alerts or b.records} == bands


@pytest.mark.parametrize("seed", [1, 2])
def test_rollups_answer_as_the_alerts_table_does(sessions, seed, monkeypatch):
    monkeypatch.setattr("store.rollup.FEW", 1)  # under a minimum score, the bands whenever an alert reaches it
    rng = random.Random(seed)
    rows = _alerts(rng, 400)
    with sessions.begin() as s:
        store_alerts(s, rows[:250])
    with sessions.begin() as s:
        store_alerts(s, rows[150:])  # 100 redelivered: counted once
        _agree(s, rng)
    with sessions.begin() as s:
        assert s.scalar(select(func.count()).select_from(Alert)) == 400
        acknowledge(s, "analyst", ids=[r["id"] for r in rng.sample(rows, 150)])
        incident = next(r["incident_id"] for r in rows if r["incident_id"])
        acknowledge(s, "analyst", incident=incident)
        unacknowledge(s, "analyst", ids=[r["id"] for r in rng.sample(rows, 60)])
        _agree(s, rng)
    with sessions.begin() as s:
        rule = create(s, Match(device="cam-1"), "known scanner", "analyst", retroactive=True)
    assert apply_retroactive(sessions, rule.id) > 0  # moves cam-1's single alerts to suppressed_alerts
    with sessions.begin() as s:
        _agree(s, rng)
    with sessions.begin() as s:  # retention as the coordinator prunes, a deletion, a time corrected
        s.query(Alert).filter(Alert.ts < NOW - timedelta(days=4, hours=5)).delete()
        s.execute(delete(Alert).where(Alert.id.in_([r["id"] for r in rows[:40]])))
        for a in s.scalars(select(Alert).where(Alert.device_id == "gw-1")):
            a.ts += timedelta(minutes=30)
        s.flush()
        _agree(s, rng)


def test_migration_adds_up_what_is_stored(sessions):
    """0013 fills the tallies from the alerts stored before it: emptied and filled again by its own statement,
    they hold what the triggers had kept."""
    from importlib import import_module

    m = import_module("store.migrations.versions.0013_alert_tallies")
    with sessions.begin() as s:
        store_alerts(s, _alerts(random.Random(3), 200))
        acknowledge(s, "analyst", ids=[a for a in s.scalars(select(Alert.id).limit(50))])
        kept = [c for c in AlertTally.__table__.c if c.name != "top"]  # (0021 fills top: its own test)
        live = select(*kept).where(AlertTally.alerts != 0)  # emptied ones stay, at 0
        before = sorted(tuple(r) for r in s.execute(live))
        s.execute(delete(AlertTally))
        postgresql = s.get_bind().dialect.name == "postgresql"
        s.execute(text(m._pg_changes(m._rows("alerts", 1)) if postgresql else m._sqlite_backfill()))
        assert sorted(tuple(r) for r in s.execute(live)) == before


def test_migration_adds_up_bands_and_tops_of_what_is_stored(sessions):
    """0021 fills the bands and the tallies' tops from the alerts stored before it: emptied and filled again by its
    own statements, they hold what the triggers had kept (acknowledgements and deletions included)."""
    from importlib import import_module

    m = import_module("store.migrations.versions.0021_alert_bands")
    rng = random.Random(7)
    with sessions.begin() as s:
        store_alerts(s, _alerts(rng, 300))
        acknowledge(s, "analyst", ids=[a for a in s.scalars(select(Alert.id).limit(80))])
        s.execute(delete(Alert).where(Alert.id.in_(select(Alert.id).order_by(Alert.score.desc()).limit(30))))
        tallies = select(AlertTally.__table__).where(AlertTally.alerts != 0)
        bands = select(AlertBand.__table__).where(AlertBand.alerts != 0)
        before = sorted(tuple(r) for r in s.execute(tallies)), sorted(tuple(r) for r in s.execute(bands))
        s.execute(delete(AlertBand))
        s.execute(AlertTally.__table__.update().values(top=None))
        for statement in m.backfill(s.get_bind().dialect.name == "postgresql"):
            s.execute(text(statement))
        assert (sorted(tuple(r) for r in s.execute(tallies)), sorted(tuple(r) for r in s.execute(bands))) == before


@pytest.mark.parametrize("since, until, grain, expected", [
    # partial hours from alerts, whole hours, whole days
    (datetime(2026, 1, 1, 22, 30), datetime(2026, 1, 4, 1, 15), DAY,
     [(None, datetime(2026, 1, 1, 22, 30), datetime(2026, 1, 1, 23)),
      (None, datetime(2026, 1, 4, 1), datetime(2026, 1, 4, 1, 15)),
      (DAY, 1767312000, 1767484800), (HOUR, 1767308400, 1767312000), (HOUR, 1767484800, 1767488400)]),
    # within one hour: alerts only
    (datetime(2026, 1, 1, 22, 30), datetime(2026, 1, 1, 22, 45), DAY,
     [(None, datetime(2026, 1, 1, 22, 30), datetime(2026, 1, 1, 22, 45))]),
    # no whole day: hours
    (datetime(2026, 1, 1, 22), datetime(2026, 1, 2, 3), DAY, [(HOUR, 1767304800, 1767322800)]),
    # unbounded
    (None, None, DAY, [(DAY, None, None)]),
    (None, datetime(2026, 1, 2, 3), HOUR, [(HOUR, None, 1767322800)]),
    (datetime(9999, 12, 31, 23, 59, 59), None, DAY, [(None, datetime(9999, 12, 31, 23, 59, 59), None)]),
    (datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999), None,
     [(None, datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999))]),
])
def test_pieces_cover_the_window_once(since, until, grain, expected):
    assert pieces(since, until, grain) == expected


def _walk(s, f: AlertFilter, limit: int, paged: bool) -> list[list[dict]]:
    pages, after = [], None
    while True:
        page, after = incidents(s, f, limit, after, paged=paged)
        pages.append(page)
        if after is None:
            return pages


@pytest.mark.parametrize("seed", [4, 5])
def test_incident_pages_read_newest_updates_first_as_grouping_all_would(sessions, seed):
    """Keyset pagination before grouping (store.keyset): every page, under random filters and page sizes, is the
    page grouping every incident and sorting them gives; some incidents share their latest update's time."""
    rng = random.Random(seed)
    rows = _alerts(rng, 500)
    tied = [r for r in rows if r["incident_id"]][:30]
    for r in tied[::2]:  # latest updates at one time: the order falls to the incident id
        r["ts"] = NOW
    with sessions.begin() as s:
        store_alerts(s, rows)
        acknowledge(s, "analyst", ids=[r["id"] for r in rng.sample(rows, 250)])
    with sessions() as s:
        ids = [i for i in s.scalars(select(Alert.incident_id).where(Alert.incident_id.is_not(None)).distinct())]
        assert len(ids) > 20
        cases = [(AlertFilter(), n) for n in (1, 2, 3)]
        cases += [(_filter(rng, ids), rng.choice((1, 2, 3, 7, 50))) for _ in range(12)]
        for f, limit in cases:
            assert _walk(s, f, limit, True) == _walk(s, f, limit, False), (f, limit)


def test_a_count_above_a_score_reads_the_score_index(postgres_url):
    """Under a minimum score few alerts pass, the counts read those alerts alone, from the score index (migration
    0017) without touching a row, instead of every alert of the window."""
    from store.rollup import tallied

    engine = make_engine(postgres_url)
    migrate(engine)
    rng = random.Random(6)
    with session_factory(engine).begin() as s:
        store_alerts(s, _alerts(rng, 3000))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE alerts"))
    with session_factory(engine)() as s:
        top = sorted(s.scalars(select(Alert.score)))[-30]
        f = AlertFilter(since=NOW - timedelta(days=7), until=NOW, min_score=top)
        rows = tallied(s, f, None)
        q = select(func.sum(rows.c.records), func.count(func.distinct(rows.c.device_id)))
        sql = str(q.compile(s.get_bind(), compile_kwargs={"literal_binds": True}))
        s.execute(text("SET LOCAL enable_seqscan = off"))  # a few thousand rows: a scan would do; not at scale
        plan = "\n".join(s.scalars(text("EXPLAIN " + sql)))
    engine.dispose()
    assert "Index Only Scan using ix_alerts_score_tally" in plan, plan


def test_bands_are_the_same_where_sqlite_lacks_its_math_functions():
    """A SQLite library built without its math functions gets Python's (store.db.sqlite_math): every score falls in
    the band the built-in functions put it in, so a database's bands do not depend on how its library was built."""
    import sqlite3

    from store.db import sqlite_math
    from store.rollup import BANDS, band_sql

    scores = [0, 0.0, -0.0, 1, -1, 2**0.5, 1e-300, -1e-300, 1e300, -1e300, 1.7e308, -1.7e308, 3, 4.39, 12.21, -7]
    scores += [2 ** (j / BANDS) - 1 for j in range(-40, 200, 7)]
    scores += [-(2 ** (j / BANDS) - 1) for j in range(1, 200, 13)]
    query = "SELECT " + band_sql("?")
    built_in, python = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    sqlite_math(python, force=True)
    for s in scores:
        args = (s,) * band_sql("?").count("?")
        assert python.execute(query, args).fetchone() == built_in.execute(query, args).fetchone(), s
    assert python.execute("SELECT ln(0), ln(-1), sign(NULL), floor(NULL), floor(3)").fetchone() == \
        built_in.execute("SELECT ln(0), ln(-1), sign(NULL), floor(NULL), floor(3)").fetchone()


def test_scores_that_are_no_finite_number_have_bands_and_counts_as_the_alerts_table(sessions):
    """Rows an older version or a hand stored with a score of +-inf or NaN (PostgreSQL only: SQLite keeps NaN as NULL,
    which the column refuses; the API serves them as null) are stored and counted: +inf (and PostgreSQL's NaN, above
    every number there) in the band above every finite score's, -inf below them; every count under a minimum equals
    the alerts table's."""
    import math

    from store.rollup import TOP_BAND

    rng = random.Random(7)
    with sessions.begin() as s:
        store_alerts(s, _alerts(rng, 60))
        nan = (math.nan,) if s.get_bind().dialect.name == "postgresql" else ()
        for i, score in enumerate((math.inf, -math.inf, *nan, math.inf, 5.0)):
            s.add(Alert(id=f"odd-{i}", device_id="cam-1", job_id="j1", model_version=1, ts=NOW - timedelta(hours=30),
                        score=score, threshold=3.0, explanation=[]))
    with sessions.begin() as s:
        postgresql = s.get_bind().dialect.name == "postgresql"
        got = {b: n for b, n in s.execute(select(AlertBand.band, func.sum(AlertBand.alerts))
                                          .where(AlertBand.span == DAY).group_by(AlertBand.band))}
        assert got[TOP_BAND] == (3 if postgresql else 2) and got[-TOP_BAND] == 1
        for minimum in (None, -1e300, 0.0, 4.0, 1e300, 1.7e308, math.inf, -math.inf):
            f = AlertFilter(since=NOW - timedelta(days=7), until=NOW + timedelta(hours=1), min_score=minimum)
            assert flagged_counts(s, f, 24) == flagged_counts(s, f, 24, rollups=False), minimum
            assert flagged_series(s, f, 24) == flagged_series(s, f, 24, rollups=False), minimum
