from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from store.db import Alert, Device, Job, ModelVersion, Round, pack, utcnow


@pytest.fixture
def app(tmp_path):
    return create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db", cookie_secure=False))


@pytest.fixture(autouse=True)
def _now_at_test_start(request):
    """A module that places alerts relative to its `NOW` (the last hour, the last 24 hours) gets it from when each
    test starts, not from when the module was imported: under pytest-xdist a file can run many minutes after the
    collection imported it, and alerts placed 50 minutes back then fall out of "the last hour"."""
    if hasattr(request.module, "NOW"):
        request.module.NOW = time.time()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_app(request, tmp_path):
    """The app over SQLite, then over PostgreSQL (skipped where no server runs on 127.0.0.1:5432)."""
    url = f"sqlite:///{tmp_path}/api.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    app = create_app(Settings(db_url=url, cookie_secure=False))
    yield app
    app.state.sessions.kw["bind"].dispose()


@pytest.fixture
def keys(app):
    with app.state.sessions.begin() as s:
        return {"admin": create_key(s, "admin"), "viewer": create_key(s, "viewer")}


@pytest.fixture
def client(app):
    return TestClient(app)


@contextmanager
def serve(app, **config) -> Iterator[str]:
    """The app behind a real uvicorn server on a free port (more uvicorn settings in `config`): its base URL."""
    import uvicorn

    from coordinator.broker import free_port
    from tests.integration.conftest import wait_until

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                           timeout_graceful_shutdown=1, **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 20, "API server")
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: quiet, headless Chromium for the browser tests (no background traffic of its own)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


def chromium(playwright, *extra: str):
    """Debian's Chromium through Playwright, headless."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra])


def signed_in_page(playwright, url: str, key: str):
    """A 1400 x 1000 page of headless Chromium, signed in to the dashboard at `url` with `key`."""
    page = chromium(playwright).new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/login")
    page.fill("#key", key)
    page.click("button[type=submit]")
    return page


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def populate(app, n_alerts: int = 250, devices: int = 5):
    """Devices, a finished job with rounds and two model versions, and alerts with known scores."""
    now = utcnow()
    with app.state.sessions.begin() as s:
        for d in range(devices):
            s.add(Device(id=f"dev-{d}", online=d % 2 == 0, rounds=d, alerts=0))
        s.add(Job(id="job-1", type="pca", algorithm="fedmm", params={"rank": 2, "rounds": 3}, status="finished",
                  phase="finished", current_round=4))
        for r in range(1, 4):
            s.add(Round(job_id="job-1", round=r, phase="train", sampled=["dev-0", "dev-1"], answered=["dev-0"],
                        metrics={"dropouts": 1, "subspace_change": 10.0 ** -r}, seconds=0.1 * r))
        for v in (1, 2):
            s.add(ModelVersion(job_id="job-1", version=v, type="pca", round=3, promoted=v == 2, published=True,
                               arrays=pack({"Z": np.eye(4)[:, :2], "mean": np.zeros(4), "scale": np.ones(4),
                                            "log_mask": np.ones(4, np.uint8)}),
                               info={"features": list("abcd"), "threshold": 3.0}))
        for i in range(n_alerts):
            s.add(Alert(id=uuid.uuid4().hex, device_id=f"dev-{i % devices}", job_id="job-1", model_version=2,
                        ts=now - timedelta(seconds=i), score=float(i), threshold=3.0,
                        explanation=[{"feature": "a", "share": 0.9, "value": 5.0, "expected": 1.0}]))


# the integration fixtures (broker, fleet, traffic) serve the browser test too
from tests.integration.conftest import broker, fleet, traffic  # noqa: E402, F401
