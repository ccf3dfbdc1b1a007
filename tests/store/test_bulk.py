"""Bulk loading (store.bulk, `fedsentry bench api --bulk`): the same fleet loaded by COPY with the roll-ups filled
after, and through the ingestion path (store_alerts, then acknowledge), leave the same alerts, roll-ups and devices,
and the app answers every request the benchmark makes alike. SQLite and partitioned alerts are refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from fedsentry.bench.api import Fleet, Requests, database, load
from store.bulk import BulkError
from store.bulk import load as bulk_load

ROLLUPS = {  # every roll-up row that counts something (the ingestion path leaves emptied ones: alerts 0, records 0)
    "alert_tallies": "SELECT span, start, device_id, job_id, incident_id, acknowledged, alerts, records, top "
                     "FROM alert_tallies WHERE alerts <> 0 OR records <> 0 ORDER BY 1, 2, 3, 4, 5, 6",
    "alert_bands": "SELECT span, start, job_id, acknowledged, band, alerts, records FROM alert_bands "
                   "WHERE alerts <> 0 OR records <> 0 ORDER BY 1, 2, 3, 4, 5",
}
STORED = {
    "alerts": "SELECT id, device_id, job_id, model_version, ts, received, score, threshold, count, "
              "explanation::text, flow::text, incident::text, incident_id, acknowledged, acknowledged_at IS NULL, "
              "acknowledged_by, ack_note FROM alerts ORDER BY id",
    "devices": "SELECT id, online, alerts, rounds FROM devices ORDER BY id",
    # the roll-up triggers on again and the indexes made again, as they were
    "triggers": "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'alerts'::regclass AND NOT tgisinternal "
                "ORDER BY 1",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'alerts' ORDER BY 1",
}


class Recorded(Requests):
    """Requests that keep every answer (JSON without the acknowledgement's time, which is the load's own, and a
    count's `until`, the time asked: no request gives one; SVG as drawn), in the order asked."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.answers: list[tuple[str, str, Any]] = []

    def get(self, path: str, params: dict[str, Any]) -> tuple[float, Any]:
        elapsed, r = super().get(path, params)
        body = _without(r.json(), {"acknowledged_at", "until"}) if path.startswith("/api/") else r.text
        self.answers.append((path, json.dumps(params, sort_keys=True, default=str), body))
        return elapsed, r


def _without(value: Any, names: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, names) for k, v in value.items() if k not in names}
    if isinstance(value, list):
        return [_without(v, names) for v in value]
    return value


def _loaded(server: str, fleet: Fleet, bulk: bool) -> dict[str, Any]:
    with database(server, scratch_server=True) as url:
        app = create_app(Settings(db_url=url))
        try:
            key = load(app, fleet, bulk=bulk)
            requests = Recorded(TestClient(app, headers={"Authorization": f"Bearer {key}"}), fleet, 1)
            requests.run()
            with app.state.sessions.kw["bind"].connect() as c:
                tables = {name: [tuple(row) for row in c.execute(text(sql))]
                          for name, sql in {**ROLLUPS, **STORED}.items()}
        finally:
            app.state.sessions.kw["bind"].dispose()
    return {"answers": requests.answers, **tables}


def test_bulk_load_leaves_what_ingestion_leaves(postgres_url):
    """5,000 alerts of 20 devices (1,500 incident updates, about 3,500 acknowledged): the alerts, every roll-up row
    and the devices' counters are the same, and so is every answer of Requests.run (its own checks pass on both)."""
    fleet = Fleet(5000, 20)
    assert fleet.incidents == 150 and 0 < fleet.acked < fleet.size
    ingested, bulk = _loaded(postgres_url, fleet, False), _loaded(postgres_url, fleet, True)
    for name in (*ROLLUPS, *STORED):
        assert len(bulk[name]) == len(ingested[name]) > 0, name
        assert bulk[name] == ingested[name], name
    assert len(bulk["answers"]) == len(ingested["answers"]) > 40
    for (path, params, got), (_, _, want) in zip(bulk["answers"], ingested["answers"], strict=True):
        assert got == want, (path, params)


def test_the_fleet_is_the_same_stream_for_a_seed():
    """Made twice, a fleet's alerts and acknowledgements are the same (the summary pass and the load's pass)."""
    fleet = Fleet(3000, 10)
    assert list(fleet.stream()) == list(fleet.stream())
    assert sum(len(c) for c in fleet.chunks(700)) == 3000
    assert Fleet(3000, 10, seed=7, end=fleet.end).noisiest is not None
    assert list(Fleet(3000, 10, seed=7, end=fleet.end).stream()) != list(fleet.stream())


def test_bulk_loading_refuses_sqlite_by_name(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/a.db"))
    try:
        with app.state.sessions.begin() as s, pytest.raises(BulkError, match="PostgreSQL only, not sqlite"):
            bulk_load(s, [])
    finally:
        app.state.sessions.kw["bind"].dispose()
