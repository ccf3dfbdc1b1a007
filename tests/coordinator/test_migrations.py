"""Migrations on a database that holds data: 0007 gives the incident updates already stored their incident id,
on SQLite and PostgreSQL, and can be taken back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from store.alerts import incident_id
from store.db import make_engine

INCIDENT = {"key": "dst_bytes+duration", "window": 1.7e9, "first": 1.7e9 + 1, "last": 1.7e9 + 9,
            "samples": [{"uid": "C1"}]}


def _to(engine, revision: str, down: bool = False) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).resolve().parents[2] / "store" / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path):
    url = f"sqlite:///{tmp_path}/m.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    e = make_engine(url)
    yield e
    e.dispose()


def test_0007_fills_in_the_incident_of_stored_updates(engine):
    _to(engine, "0006")
    insert = text("INSERT INTO alerts (id, device_id, job_id, model_version, ts, received, score, threshold, count, "
                  "explanation, incident, acknowledged) VALUES (:id, 'cam-1', 'j', 1, :ts, :ts, 9.0, 3.0, :n, '[]', "
                  ":incident, false)")
    with engine.begin() as c:
        c.execute(insert, {"id": "upd", "ts": "2026-01-01 00:00:00", "n": 40, "incident": json.dumps(INCIDENT)})
        c.execute(insert, {"id": "plain", "ts": "2026-01-01 00:00:01", "n": 1, "incident": "null"})
        c.execute(insert, {"id": "none", "ts": "2026-01-01 00:00:02", "n": 1, "incident": None})
    _to(engine, "head")
    with engine.connect() as c:
        got = dict(c.execute(text("SELECT id, incident_id FROM alerts")).all())
    assert got == {"upd": incident_id("cam-1", INCIDENT), "plain": None, "none": None}
    assert got["upd"] and len(got["upd"]) == 20
    _to(engine, "0006", down=True)
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM alerts")).scalar() == 3


def test_0009_keeps_forwarding_state_with_nothing_failed(engine):
    _to(engine, "0008")
    with engine.begin() as c:
        c.execute(text("INSERT INTO forward_destinations (id, label, since, cursor, delivered, updated) VALUES "
                       "('d', 'syslog udp://h:514', '2026-01-01', '2026-01-01', 7, '2026-01-01')"))
        c.execute(text("INSERT INTO forward_deliveries (destination_id, alert_id, received) VALUES "
                       "('d', 'a1', '2026-01-01')"))
    _to(engine, "head")
    with engine.connect() as c:
        assert c.execute(text("SELECT delivered, failed FROM forward_destinations")).one() == (7, 0)
        assert c.execute(text("SELECT alert_id, failed FROM forward_deliveries")).one() == ("a1", False)
    _to(engine, "0008", down=True)
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM forward_deliveries")).scalar() == 1


def _indexes(engine) -> dict[str, tuple[list[str], str | None]]:
    """The alerts table's indexes: columns (with PostgreSQL's INCLUDE ones after them) and the partial condition."""
    from sqlalchemy import inspect

    out = {}
    for ix in inspect(engine).get_indexes("alerts"):
        include = ix.get("include_columns") or ix.get("dialect_options", {}).get("postgresql_include") or []
        where = ix.get("dialect_options", {}).get(f"{engine.dialect.name}_where")
        out[ix["name"]] = ([*ix["column_names"], *include], None if where is None else str(where))
    return out


def test_0017_indexes_scores_and_keeps_incident_updates_alone(engine):
    """0017 adds the score index holding what a count reads, and narrows the incident index to incident updates,
    with the alerts already stored in both; taken back, the incident index holds every alert again."""
    _to(engine, "0016")
    insert = text("INSERT INTO alerts (id, device_id, job_id, model_version, ts, received, score, threshold, count, "
                  "explanation, incident, incident_id, acknowledged) VALUES (:id, 'cam-1', 'j', 1, :ts, :ts, :score, "
                  "3.0, :n, '[]', :incident, :iid, false)")
    with engine.begin() as c:
        c.execute(insert, {"id": "upd", "ts": "2026-01-01 00:00:00", "score": 9.5, "n": 40,
                           "incident": json.dumps(INCIDENT), "iid": incident_id("cam-1", INCIDENT)})
        c.execute(insert, {"id": "plain", "ts": "2026-01-01 00:00:01", "score": -2.0, "n": 1, "incident": None,
                           "iid": None})
    _to(engine, "head")
    held = ["ts", "device_id", "incident_id", "count", "acknowledged", "job_id"]
    got = _indexes(engine)
    assert got["ix_alerts_score_tally"][0] == ["score", *held]
    assert got["ix_alerts_incident_tally"][0] == ["incident_id", "device_id", "ts", "count", "score", "acknowledged",
                                                  "job_id"]
    assert "incident_id IS NOT NULL" in (got["ix_alerts_incident_tally"][1] or "")
    with engine.connect() as c:
        assert c.execute(text("SELECT id FROM alerts WHERE score >= 9 ORDER BY score")).scalars().all() == ["upd"]
        assert c.execute(text("SELECT count(*) FROM alerts WHERE incident_id IS NULL")).scalar() == 1
    _to(engine, "0016", down=True)
    got = _indexes(engine)
    assert "ix_alerts_score_tally" not in got and got["ix_alerts_incident_tally"][1] is None
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM alerts")).scalar() == 2
