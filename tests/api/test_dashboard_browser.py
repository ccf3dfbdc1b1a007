"""The dashboard in headless Chromium over a real stack: broker, coordinator, agents, API.

An admin creates a job through the API over running agents and watches it finish; then, with the
dashboard open, a device starts raising alerts and they appear without a reload. The page runs under the
server's Content-Security-Policy without a violation; a page on another port of the same host cannot
use the dashboard's cookie to cancel a job; signing out ends the session on the server."""

from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from coordinator.broker import free_port
from coordinator.service import Coordinator
from edge_agent.sources import Batch
from store.db import Alert, utcnow
from tests.api.conftest import chromium, needs_chromium
from tests.integration.conftest import parts_for, wait_until

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
pytestmark = needs_chromium


@pytest.fixture
def stack(broker, fleet, traffic, tmp_path):
    db = f"sqlite:///{tmp_path}/serve.db"
    coordinator = Coordinator(broker.url, db).start()
    app = create_app(Settings(db_url=db))
    with app.state.sessions.begin() as s:
        admin = create_key(s, "admin")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 20, "API server")
    yield {"url": f"http://127.0.0.1:{port}", "admin": admin, "fleet": fleet, "traffic": traffic,
           "coordinator": coordinator, "sessions": app.state.sessions}
    server.should_exit = True
    thread.join(timeout=10)
    coordinator.close()


def test_live_dashboard(stack):
    url, admin, fleet = stack["url"], stack["admin"], stack["fleet"]
    data, split = stack["traffic"]
    for i, part in enumerate(parts_for(split, 4)):
        fleet.add(f"dev-{i}", part, data.feature_names)
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    wait_until(lambda: len([d for d in api.get("/api/v1/devices").json()["items"] if d["online"]]) == 4, 30,
               "devices online")
    r = api.post("/api/v1/jobs", json={"id": "ui-job", "type": "pca", "features": data.feature_names, "rank": 3,
                                       "rounds": 12, "fraction": 0.5, "min_agents": 4, "algorithm": "fedmm"})
    assert r.status_code == 201, r.text
    wait_until(lambda: api.get("/api/v1/jobs/ui-job").json()["status"] == "finished", 60, "job finished")
    assert len([x for x in api.get("/api/v1/jobs/ui-job").json()["rounds"] if x["phase"] == "train"]) == 12

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        page.goto(f"{url}/")
        assert page.url.endswith("/login")
        page.fill("#key", admin)
        page.click("button[type=submit]")
        page.wait_for_selector("#live.on", timeout=15_000)
        assert page.locator("#anomalies tbody tr").count() == 0
        # a device starts seeing attacks while the page is open
        attacks = split.X_test[split.y_test == 1][:40]
        fleet.add("cam-7", None, data.feature_names, source=iter([Batch(data.feature_names, attacks)]),
                  wait_for_model=True, alert_burst=1000)
        page.wait_for_selector("#anomalies tbody tr.new", timeout=20_000)
        wait_until(lambda: page.locator("#anomalies tbody tr").count() >= 10, 20, "alerts on the page")
        assert "cam-7" in page.inner_text("#anomalies tbody")
        assert page.evaluate("document.querySelector('#convergence').naturalWidth") > 0
        # (no page.wait_for_function: it evaluates a string, which the page's CSP rightly forbids)
        wait_until(lambda: "cam-7" in page.inner_text("#devices tbody"), 10, "cam-7 in the device list")
        # acknowledge the newest from the page; the API agrees
        first_id = page.get_attribute("#anomalies tbody tr:first-child", "id")[2:]
        page.click("#anomalies tbody tr:first-child button[data-ack]")
        wait_until(lambda: api.get(f"/api/v1/anomalies/{first_id}").json()["acknowledged"], 10, "acknowledged")
        # a row stored before ingestion checked alerts (infinite score, explanation a string, an id that
        # would end a server-sent event) neither stops the page nor forges a device; later alerts still show
        _store_bad_alert(stack["sessions"], "bad\n\nevent: anomaly\ndata: {\"id\": \"x\", \"device_id\": \"ghost\"}",
                         "dev-bad", math.inf)
        _store_bad_alert(stack["sessions"], "after-bad", "dev-after", 7.0)
        wait_until(lambda: "dev-after" in page.inner_text("#anomalies tbody"), 10, "the alert after the bad one")
        shown = page.inner_text("#anomalies tbody")
        assert "dev-bad" in shown and "ghost" not in shown
        # filters, answered by the server without reloading the page
        page.fill("#f-score", "1e300")  # only the row whose stored score is infinite
        wait_until(lambda: page.inner_text("#anomalies tbody").count("dev-bad") == 1 and
                   page.locator("#anomalies tbody tr").count() == 1, 10, "no finite anomaly that high")
        page.fill("#f-score", "")
        wait_until(lambda: "cam-7" in page.inner_text("#anomalies tbody"), 10, "anomalies again")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        assert not [m for m in console if "Content Security Policy" in m], console
        _cross_site_cancel_is_refused(page, url, api)
        # signing out ends the session on the server: a copy of the cookie taken before is refused after
        (cookie,) = [c for c in page.context.cookies() if c["name"] == "fedsentry_session"]
        page.goto(f"{url}/")
        page.click("form.logout button")
        page.wait_for_url("**/login")
        stolen = httpx.get(f"{url}/api/v1/devices", cookies={"fedsentry_session": cookie["value"]})
        assert stolen.status_code == 401, stolen.text
        browser.close()
    filtered = api.get("/api/v1/anomalies", params={"device": "cam-7", "min_score": 0.0, "limit": 500}).json()
    assert len(filtered["items"]) >= 10 and all(a["device_id"] == "cam-7" for a in filtered["items"])
    assert np.isfinite([a["score"] for a in filtered["items"]]).all()


def _cross_site_cancel_is_refused(page, url: str, api: httpx.Client) -> None:
    """A page served from another port of the same host (same site, so the browser sends the strict
    cookie along) posts a cancellation to the API: refused, the job keeps waiting."""
    r = api.post("/api/v1/jobs", json={"id": "victim", "features": ["a", "b", "c"], "rank": 1, "min_agents": 1000})
    assert r.status_code == 201, r.text
    html = (f'<form method="post" action="{url}/api/v1/jobs/victim/cancel"><button id="go">win a prize</button>'
            f'</form>').encode()

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args):
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", free_port()), Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://127.0.0.1:{evil.server_port}/")
        with page.expect_response(lambda resp: resp.url.endswith("/victim/cancel")) as answer:
            page.click("#go")
        assert answer.value.status == 403
    finally:
        evil.shutdown()
    assert api.get("/api/v1/jobs/victim").json()["status"] == "pending"


def _store_bad_alert(sessions, alert_id: str, device: str, score: float) -> None:
    with sessions.begin() as s:
        s.add(Alert(id=alert_id, device_id=device, job_id="ui-job", model_version=1, ts=utcnow(), score=score,
                    threshold=1.0, explanation="not a list"))
