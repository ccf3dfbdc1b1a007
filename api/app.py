"""The FastAPI application: REST under /api/v1, /healthz, /metrics and the dashboard."""

from __future__ import annotations

import logging
import threading
from importlib.metadata import version
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from api.jsonsafe import SafeJSONResponse
from api.live import LiveSlots
from api.middleware import AuthFirst, BodyLimit, SecurityHeaders
from api.routes import (
    anomalies,
    charts,
    dashboard,
    devices,
    docs,
    feedback,
    health,
    incidents,
    jobs,
    models,
    records,
    suppressions,
)
from api.settings import Settings
from models.families import FAMILIES


def _problem(e: dict) -> dict[str, str]:
    """One validation error as {field, problem}; checks across fields name the field they are about."""
    loc = [str(p) for p in e.get("loc", ())]
    if len(loc) > 1 and loc[0] == "body" and loc[1] in FAMILIES:  # the job body's union member: not a field
        family = loc.pop(1)
        if e.get("type") == "extra_forbidden":
            return {"field": ".".join(loc), "problem": f"not a setting of a {family} job"}
    ctx = e.get("ctx") or {}
    if e.get("type") == "job" and "field" in ctx:
        return {"field": ".".join([*loc, str(ctx["field"])]), "problem": str(ctx["problem"])}
    return {"field": ".".join(loc), "problem": e.get("msg", "invalid")}


def create_app(settings: Settings | None = None, sessions=None) -> FastAPI:
    """The app over the database in settings (migrated to the newest schema), or over given sessions."""
    settings = settings or Settings()
    if sessions is None:
        from store.db import make_engine, migrate, session_factory

        engine = make_engine(settings.db_url)
        migrate(engine)
        sessions = session_factory(engine)
    app = FastAPI(title="FedSentry", version=version("fedsentry"),
                  description="Federated anomaly detection for IoT networks: jobs, anomalies, devices, models. "
                              "Every route needs an API key (`Authorization: Bearer <key>`) except /healthz.",
                  docs_url=None, redoc_url=None, default_response_class=SafeJSONResponse)
    app.state.settings, app.state.sessions = settings, sessions
    _resume_suppressions(sessions)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": [_problem(e) for e in exc.errors()]})

    # the last added runs first: security headers on every answer, then the body limit, then the key check
    app.add_middleware(AuthFirst)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(SecurityHeaders, https=settings.cookie_secure)
    app.state.live_slots = LiveSlots()  # live feeds open, per key and in all (api/live.py)
    app.include_router(jobs.create_router())  # the job body of the families registered now
    for r in (jobs, anomalies, incidents, records, suppressions, feedback, devices, models, health, dashboard, charts,
              docs):
        app.include_router(r.router)
    app.mount("/static", StaticFiles(directory=str(Path(__file__).parent / "static")), name="static")
    app.mount(docs.ASSETS, docs.assets(), name="docs-assets")
    try:
        from api.routes import recommendations

        app.include_router(recommendations.router)
    except ImportError:  # the recommendation models are not installed
        pass
    return app


def _resume_suppressions(sessions: Any) -> None:
    """Finish, in the background, the retroactive suppression rules a stopped server left half applied."""
    from store.suppress import resume_retroactive

    def run() -> None:
        try:
            resume_retroactive(sessions)
        except Exception:  # the server serves on; the rule stays "running" for the next start
            logging.getLogger("fedsentry.api").exception("resuming retroactive suppression rules failed")

    threading.Thread(target=run, name="retroactive-rules", daemon=True).start()
