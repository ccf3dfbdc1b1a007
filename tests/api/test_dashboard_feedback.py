"""False-positive feedback on the dashboard (issue 24, point 3), in headless Chromium over a real server and
database: an admin marks an alert from its row with a reason, sees the action with who took it, then the effect its
device reported (threshold before and after, capped, no training without consent), and undoes it; a viewer sees the
actions and can neither mark nor undo."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from store import feedback
from store.alerts import alert_row, store_alerts
from store.db import Feedback, utcnow
from tests.api.conftest import needs_chromium, serve
from tests.api.test_dashboard_suppressions import _alert, _login
from tests.integration.conftest import wait_until

pytestmark = needs_chromium


@pytest.fixture
def site(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/ui.db"))
    with app.state.sessions.begin() as s:
        keys = {"admin": create_key(s, "admin", "alice@soc"), "viewer": create_key(s, "viewer")}
        store_alerts(s, [alert_row("nas-1", "job-1", 1, _alert(i, "10.0.8.5"), utcnow()) for i in range(3)])
    with serve(app) as url:
        yield url, keys, app.state.sessions


def test_an_admin_marks_an_alert_sees_its_effect_and_undoes_it(site):
    url, keys, sessions = site
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        page = _login(p, url, keys["admin"])
        alert_id = page.locator("#anomalies tbody tr").first.get_attribute("id")[2:]
        page.locator(f'button[data-fp="{alert_id}"]').click()
        assert page.input_value("#fb-target") == alert_id
        page.fill("#fb-reason", "the NAS backup")
        page.click("#fb-add")
        wait_until(lambda: "1 records of nas-1 marked" in page.inner_text("#fb-result"), 10, "marked")
        row = page.inner_text("#feedback tbody tr:first-child")
        assert "alice@soc" in row and alert_id in row and "the NAS backup" in row and "not reported yet" in row
        with sessions.begin() as s:  # what the coordinator writes when the device reports
            fid = s.scalars(select(Feedback.id)).one()
            feedback.record_effect(s, "nas-1", {"model": "job-1:1", "training": False, "actions": {fid: {
                "before": 1.0, "after": 2.0, "cap": 2.0, "capped": True, "records": 1, "stale": 0, "trained": 0}}})
        wait_until(lambda: "capped at 2.000" in page.inner_text("#feedback tbody tr:first-child"), 10, "effect shown")
        assert "did not consent" in page.inner_text("#feedback tbody tr:first-child")
        viewer = _login(p, url, keys["viewer"])
        viewer.wait_for_selector("#feedback tbody tr")
        assert viewer.locator("#fb-form").count() == 0 and viewer.locator("button[data-fp]").count() == 0
        assert viewer.locator("#feedback button").count() == 0
        page.click("#feedback button[data-unfeedback]")
        wait_until(lambda: "undone by alice@soc" in page.inner_text("#feedback tbody tr:first-child"), 10, "undone")

