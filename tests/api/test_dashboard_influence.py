"""The operator sees influence in the dashboard (issue 22, point 5): for the selected job, the devices it
refused, capped or kept out of the shared model, how often and why, the repeatedly excluded ones flagged;
headless Chromium over a real server and database."""

from __future__ import annotations

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from models.families import job_spec
from store.db import Round
from store.jobs import create_job
from tests.api.conftest import needs_chromium, serve, signed_in_page
from tests.integration.conftest import wait_until

pytestmark = needs_chromium
WHY = "2 of its components too few devices support (the support rule): kept out of the shared model, its own"


def test_the_dashboard_shows_who_the_job_kept_out_and_flags_the_repeated(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/ui.db"))
    create_job(app.state.sessions, "gmm-1", job_spec("gmm", {"features": ["a", "b"]}))
    with app.state.sessions.begin() as s:
        key = create_key(s, "viewer")
        for r in range(1, 7):
            influence = {"kept_out": {"cam-3": WHY}, **({"refused": {"plug-9": "norm: too large"}} if r == 2 else {})}
            s.add(Round(job_id="gmm-1", round=r, phase="train", sampled=["cam-3", "plug-9", "tv-1"],
                        answered=["cam-3", "plug-9", "tv-1"], metrics={"influence": influence}, seconds=0.1))
    from playwright.sync_api import sync_playwright

    with serve(app) as url, sync_playwright() as p:
        page = signed_in_page(p, url, key)
        wait_until(lambda: page.locator("#influence tbody tr").count() == 2, 15, "the job's influence table")
        first, second = page.locator("#influence tbody tr").all_inner_texts()
        assert first.startswith("cam-3") and "flagged" in first and "support rule" in first
        assert "6" in first.split("\t")[3]  # kept out in all six rounds
        assert second.startswith("plug-9") and "flagged" not in second and "norm: too large" in second
        assert page.locator("#influence tr.flagged").count() == 1
