"""The API docs in headless Chromium with no network but this machine: Swagger UI renders every operation,
a request made before authorising is refused, the Authorize button takes an admin key, and the same request
then succeeds; ReDoc renders too. Every request the browser tries goes to 127.0.0.1, and the pages run
under their Content-Security-Policy without a violation."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from tests.api.conftest import chromium, needs_chromium, populate, serve
from tests.integration.conftest import wait_until

pytestmark = needs_chromium
# no name resolves, so nothing but 127.0.0.1 is reachable even for a request the routing below missed
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"


@pytest.fixture
def served(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/docs.db"))
    populate(app, n_alerts=3)
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    operations = sum(len(ops) for ops in app.openapi()["paths"].values())
    with serve(app) as url:
        yield url, key, operations


def test_swagger_ui_works_offline_and_authorizes_with_a_key(served):
    url, key, operations = served
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = chromium(p, OFFLINE)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        elsewhere: list[str] = []  # requests for anything but 127.0.0.1: refused, and the test fails

        def only_this_machine(route):
            if urlsplit(route.request.url).hostname == "127.0.0.1":
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort("internetdisconnected")

        context.route("**/*", only_this_machine)
        page = context.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        page.on("pageerror", lambda e: console.append(f"page error: {e}"))
        requested: list[str] = []
        page.on("request", lambda r: requested.append(r.url))

        page.goto(f"{url}/docs")
        page.wait_for_selector(".opblock", timeout=20_000)
        assert page.locator(".opblock").count() == operations
        devices = page.locator(".opblock-get", has=page.locator('[data-path="/api/v1/devices"]'))
        devices.locator(".opblock-summary").click()
        devices.locator(".try-out__btn").click()
        assert _execute(page, devices) == 401  # no key yet
        page.click(".auth-wrapper .authorize")
        page.fill(".modal-ux input", key)
        page.click(".modal-ux .auth-btn-wrapper button[type=submit]")
        page.click(".modal-ux .btn-done")
        with page.expect_request(lambda r: urlsplit(r.url).path == "/api/v1/devices") as sent:
            assert _execute(page, devices) == 200
        assert sent.value.headers["authorization"] == f"Bearer {key}"
        wait_until(lambda: "dev-0" in devices.locator(".live-responses-table").inner_text(), 10, "the devices shown")

        page.goto(f"{url}/redoc")
        page.wait_for_selector("h1", timeout=20_000)
        assert page.locator("h1").first.inner_text().startswith("FedSentry")
        wait_until(lambda: page.locator("[data-section-id^='operation/']").count() == operations, 20,
                   "ReDoc's operations")
        browser.close()
    assert elsewhere == []  # routed requests for another host
    away = [u for u in requested if urlsplit(u).hostname != "127.0.0.1" and not u.startswith(("data:", "blob:"))]
    assert requested and away == []  # also those the CSP blocked before they reached the network
    assert not [m for m in console if "Content Security Policy" in m or m.startswith("page error")], console


def _execute(page, operation) -> int:
    """Press the operation's Execute button: the status its live response shows."""
    with page.expect_response(lambda r: "/api/v1/devices" in r.url) as answer:
        operation.locator(".execute").click()
    status = answer.value.status
    shown = operation.locator(".live-responses-table tr.response .response-col_status")  # e.g. "401 Undocumented"
    wait_until(lambda: shown.inner_text().split()[:1] == [str(status)], 10, "the response shown")
    return status
