"""An incident's every flow on the dashboard (issue 24, point 1), in headless Chromium over a real server and
database: the incident's link opens its flagged records, newest first, and pages to the oldest."""

from __future__ import annotations

import time
import uuid

import pytest

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from store.alerts import alert_row, store_alerts
from store.db import utcnow
from tests.api.conftest import needs_chromium, serve, signed_in_page
from tests.integration.conftest import wait_until

pytestmark = needs_chromium
NOW = time.time()


def _update(k: int, n: int) -> dict:
    window = NOW - 600
    records = [{"ts": NOW - 500 + k * n + i, "score": 7.5, "explanation": [{"feature": "dst_bytes", "value": 9e5,
                                                                          "expected": 300.0}],
                "flow": {"uid": f"R{k * n + i:04d}", "id.orig_h": "10.0.0.5", "id.orig_p": 5000 + i,
                         "id.resp_h": "10.0.9.1", "id.resp_p": 23, "proto": "tcp"}} for i in range(n)]
    return {"id": uuid.uuid4().hex, "ts": NOW - 400 + k, "score": 9.0, "threshold": 3.0, "count": n,
            "explanation": [{"feature": "dst_bytes", "share": 1.0, "value": 9e5, "expected": 300.0}],
            "flow": None, "records": records,
            "incident": {"key": "dst_bytes", "window": window, "first": window + 1, "last": NOW - 400 + k,
                         "samples": []}}


@pytest.fixture
def site(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/ui.db"))
    with app.state.sessions.begin() as s:
        viewer = create_key(s, "viewer")
        store_alerts(s, [alert_row("cam-9", "job-1", 1, _update(k, 40), utcnow()) for k in range(3)])
    with serve(app) as url:
        yield url, viewer


def test_an_incidents_every_flow_pages_from_its_link(site):
    url, key = site
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        page = signed_in_page(p, url, key)
        page.wait_for_selector("#incidents tbody tr")
        assert not page.is_visible("#flows")
        page.click("#incidents tbody tr:first-child a[data-flows]")
        wait_until(lambda: page.locator("#records tbody tr").count() == 50, 10, "the first 50 flows")
        assert "R0119" in page.inner_text("#records tbody tr:first-child")  # newest first
        page.click("#records-more")
        wait_until(lambda: page.locator("#records tbody tr").count() == 100, 10, "the next page")
        page.click("#records-more")
        wait_until(lambda: page.locator("#records tbody tr").count() == 120, 10, "the oldest flows")
        assert not page.is_visible("#records-more")
        assert "R0000" in page.inner_text("#records tbody tr:last-child")
        assert "10.0.0.5:5000 → 10.0.9.1:23" in page.inner_text("#records tbody tr:last-child")
