"""Suppression rules on the dashboard (issue 24, point 2), in headless Chromium over a real server and database:
an admin adds a rule with the form (retroactively: the matching stored alerts leave the list), sees it with who
made it and how many it held back, and removes it; a viewer sees the rules and no form."""

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


def _alert(i: int, resp_h: str) -> dict:
    return {"id": uuid.uuid4().hex, "ts": NOW - 60 - i, "score": 5.0, "threshold": 1.0, "count": 1,
            "explanation": [{"feature": "dst_bytes", "share": 1.0, "value": 9e6, "expected": 1.0}],
            "flow": {"uid": f"C{i}", "id.orig_h": "192.168.1.7", "id.resp_h": resp_h, "id.resp_p": 445}}


@pytest.fixture
def site(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/ui.db"))
    with app.state.sessions.begin() as s:
        keys = {"admin": create_key(s, "admin", "alice@soc"), "viewer": create_key(s, "viewer")}
        store_alerts(s, [alert_row("nas-1", "job-1", 1, _alert(i, "10.0.8.5" if i < 6 else "172.16.0.1"), utcnow())
                         for i in range(10)])
    with serve(app) as url:
        yield url, keys


def _login(p, url: str, key: str):
    page = signed_in_page(p, url, key)
    page.wait_for_selector("#anomalies tbody tr")
    return page


def test_an_admin_adds_and_removes_a_rule_from_the_dashboard(site):
    url, keys = site
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        page = _login(p, url, keys["admin"])
        assert page.locator("#anomalies tbody tr").count() == 10
        page.fill("#sup-reason", "backups to the NAS")
        page.fill("#sup-cidr", "10.0.8.0/24")
        page.fill("#sup-port", "445")
        page.check("#sup-retro")
        page.click("#sup-add")
        wait_until(lambda: "6 stored alerts" in page.inner_text("#sup-result"), 10, "the rule's result")
        wait_until(lambda: page.locator("#anomalies tbody tr").count() == 4, 10, "held alerts gone from the list")
        row = page.inner_text("#suppressions tbody tr:first-child")
        assert "alice@soc" in row and "cidr=10.0.8.0/24" in row and "backups to the NAS" in row and "6" in row
        page.click("#suppressions button[data-unsuppress]")
        wait_until(lambda: "removed by alice@soc" in page.inner_text("#suppressions tbody tr:first-child"), 10,
                   "the rule removed")
        viewer = _login(p, url, keys["viewer"])
        assert viewer.locator("#sup-form").count() == 0
        assert "backups to the NAS" in viewer.inner_text("#suppressions")
        assert viewer.locator("#suppressions button").count() == 0
