"""Reads survive whatever rows the database holds (written before ingestion checked them, or by hand):
an explanation that is not a list, scores that are not finite, ids with line breaks."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from fastapi.testclient import TestClient

from api.security import create_key
from store.db import Alert, Job, Round, utcnow
from tests.api.conftest import bearer, populate, serve
from tests.integration.conftest import wait_until

GOOD = [{"feature": "a", "share": 0.9, "value": 5.0, "expected": 1.0}]


def alert(alert_id: str, **kw) -> Alert:
    fields = {"device_id": "dev-0", "job_id": "job-1", "model_version": 2, "ts": utcnow(), "score": 5.0,
              "threshold": 3.0, "explanation": GOOD, **kw}
    return Alert(id=alert_id, **fields)


# SQLite stores a NaN float as NULL and PostgreSQL's json refuses NaN and Infinity: what each can hold
BAD_ROWS = {
    "expl-str": {"explanation": "the residual was large"},
    "expl-dict": {"explanation": {"feature": "a"}},
    "expl-mixed": {"explanation": [GOOD[0], "x", 3, None, {"feature": "b", "share": None}]},
    "score-inf": {"score": math.inf},
    "score-neg-inf": {"score": -math.inf, "threshold": math.inf},
}


def sqlite(app) -> bool:
    return app.state.sessions.kw["bind"].dialect.name == "sqlite"


@pytest.fixture
def api(any_app):
    populate(any_app, n_alerts=2)
    with any_app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
        for alert_id, kw in BAD_ROWS.items():
            s.add(alert(alert_id, **kw))
        if sqlite(any_app):
            s.add(alert("expl-nan", explanation=[{"feature": "b", "share": math.nan, "value": math.inf}]))
        else:
            s.add(alert("score-nan", score=math.nan, threshold=math.nan))
    return TestClient(any_app, raise_server_exceptions=False, headers=bearer(key))


def test_bad_rows_are_listed_and_served_as_strict_json(api):
    r = api.get("/api/v1/anomalies", params={"limit": 500})
    assert r.status_code == 200, r.text
    items = {a["id"]: a for a in json.loads(r.text, parse_constant=_refuse)["items"]}  # no NaN/Infinity tokens
    assert items["expl-str"]["explanation"] == [] and items["expl-dict"]["explanation"] == []
    assert items["expl-mixed"]["explanation"] == [GOOD[0], {"feature": "b", "share": None}]
    assert items["score-inf"]["score"] is None and items["score-inf"]["threshold"] == 3.0
    assert items["score-neg-inf"]["score"] is None and items["score-neg-inf"]["threshold"] is None
    if "expl-nan" in items:
        assert items["expl-nan"]["explanation"] == [{"feature": "b", "share": None, "value": None}]
    else:
        assert items["score-nan"]["score"] is None and items["score-nan"]["threshold"] is None
    for alert_id in items:
        one = api.get(f"/api/v1/anomalies/{alert_id}")
        assert one.status_code == 200 and json.loads(one.text, parse_constant=_refuse) == items[alert_id]


def test_non_finite_round_metrics_and_odd_params_are_served(any_app, api):
    with any_app.state.sessions.begin() as s:
        s.add(Job(id="odd", type="pca", algorithm="fedmm", params="not a dict", status="running"))
        s.flush()
        s.add(Round(job_id="odd", round=1, phase="train", sampled=["a"], answered=[], seconds=math.inf,
                    metrics={"subspace_change": math.inf, "loss": math.nan} if sqlite(any_app) else {}))
        s.add(Round(job_id="odd", round=2, phase="train", sampled=["a"], answered=[], seconds=0.1,
                    metrics={"subspace_change": "big"}))
    r = api.get("/api/v1/jobs/odd")
    assert r.status_code == 200, r.text
    job = json.loads(r.text, parse_constant=_refuse)
    assert job["params"] == {} and job["rounds"][0]["seconds"] is None
    if sqlite(any_app):
        assert job["rounds"][0]["metrics"] == {"subspace_change": None, "loss": None}
    assert api.get("/api/v1/jobs").status_code == 200
    assert api.get("/charts/jobs/odd/convergence.svg").status_code == 200


def _refuse(token: str):
    raise AssertionError(f"{token} is not JSON")


def test_an_alert_id_with_line_breaks_cannot_inject_a_server_sent_event(tmp_path):
    from api.app import create_app
    from api.settings import Settings

    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/sse.db", cookie_secure=False))
    with app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
    fake = json.dumps({"id": "fake", "device_id": "ghost-device", "score": 1e9})
    evil_id = f"x\n\nevent: anomaly\ndata: {fake}\r\nid: y"
    with serve(app) as url, httpx.Client(base_url=url, headers=bearer(key), timeout=10) as client, \
            client.stream("GET", "/api/v1/anomalies/stream") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        text, lines = "", stream.iter_text()
        text += next(lines)  # the stream is open: what is stored from now on is news
        with app.state.sessions.begin() as s:
            s.add(alert(evil_id, device_id="dev-real", score=math.inf, explanation="oops"))
            s.add(alert("after", device_id="dev-after"))

        def got_both() -> bool:
            nonlocal text
            text += next(lines)
            return "dev-after" in text

        wait_until(got_both, 10, "both alerts on the stream")
    events = parse_sse(text)
    assert [json.loads(data)["device_id"] for kind, data in events if kind == "anomaly"] == ["dev-real", "dev-after"]
    first = json.loads(events[0][1], parse_constant=_refuse)
    assert first["id"] == evil_id and first["score"] is None and first["explanation"] == []


def parse_sse(text: str) -> list[tuple[str, str]]:
    """The events a browser's EventSource dispatches (HTML spec: lines end at CR, LF or CRLF)."""
    events, kind, data = [], "message", []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data:
                events.append((kind, "\n".join(data)))
            kind, data = "message", []
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
    return events


def test_the_live_feed_sends_every_alert_of_a_message_larger_than_a_page(any_app):
    """One MQTT message of 300 alerts is stored with one `received` time; the feed read `received >= last
    LIMIT 200` and served the same 200 forever: the last 100 and everything after them never came."""
    from datetime import timedelta

    app = any_app
    with app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
        s.add(alert("old", device_id="dev-old"))  # stored before the feed opens: not news
    with serve(app) as url, httpx.Client(base_url=url, headers=bearer(key), timeout=10) as client, \
            client.stream("GET", "/api/v1/anomalies/stream") as stream:
        text, lines = "", stream.iter_text()
        text += next(lines)
        now = utcnow()
        with app.state.sessions.begin() as s:
            for i in range(300):
                s.add(alert(f"burst-{i:03d}", device_id="dev-burst", received=now))
        with app.state.sessions.begin() as s:  # committed late: received before the burst
            s.add(alert("late", device_id="dev-late", received=now - timedelta(seconds=1)))
            s.add(alert("after", device_id="dev-after", received=now + timedelta(seconds=1)))

        def got_all() -> bool:
            nonlocal text
            for _ in range(100):  # a chunk an event: read on while they come
                text += next(lines)
                if text.count('"device_id"') >= 302:
                    return True
            return False

        wait_until(got_all, 20, "every alert on the stream")
    ids = [json.loads(data)["id"] for kind, data in parse_sse(text) if kind == "anomaly"]
    assert sorted(ids) == sorted([f"burst-{i:03d}" for i in range(300)] + ["late", "after"])  # each once, no old


def test_live_feeds_are_capped_per_key_and_free_their_slot_when_closed(app, keys):
    """Each feed holds a connection and polls twice a second: one key cannot open them without bound."""
    from api.live import FEEDS_PER_KEY

    with serve(app) as url, httpx.Client(base_url=url, headers=bearer(keys["viewer"]), timeout=10) as client:
        streams = [client.stream("GET", "/api/v1/anomalies/stream") for _ in range(FEEDS_PER_KEY)]
        opened = [s.__enter__() for s in streams]
        assert all(r.status_code == 200 for r in opened)
        with client.stream("GET", "/api/v1/anomalies/stream") as over:  # (an open feed would never end)
            assert over.status_code == 429
            assert "live feeds open already" in json.loads(over.read())["detail"]
        assert client.get("/api/v1/anomalies").status_code == 200  # the API answers meanwhile
        streams[0].__exit__(None, None, None)

        def reopened() -> bool:
            with client.stream("GET", "/api/v1/anomalies/stream") as r:
                return r.status_code == 200

        wait_until(reopened, 10, "the closed feed's slot to be free again")
        for s in streams[1:]:
            s.__exit__(None, None, None)
