"""The dashboard: sign in once with a key, then a session cookie (ended on the server by signing out);
pages, static files and SVG charts."""

from __future__ import annotations

from pathlib import Path as _Path

from fastapi import APIRouter, Depends, Form, HTTPException, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.charts import bar_chart, line_chart
from api.deps import COOKIE, caller, get_db, same_origin
from api.schemas import ID_PATTERN
from api.security import end_session, read_session, start_session, verify_key
from coordinator.db import Alert, Job, Round

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(_Path(__file__).resolve().parent.parent / "templates"))
# a chart opened on its own is an SVG document: its inline <style> may apply, nothing may run
SVG_HEADERS = {"Cache-Control": "no-store",
               "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"}


def _cross_site(request: Request) -> None:
    """Sign-in and sign-out forms are only accepted from the dashboard's own pages."""
    if "origin" in request.headers and not same_origin(request):
        raise HTTPException(403, "cross-site request refused: sign in and out from the dashboard's own pages")


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, error: str | None = None) -> HTMLResponse:
    return templates.TemplateResponse(request, "login.html", {"error": error})


@router.post("/login")
def login(request: Request, key: str = Form(..., max_length=200), db: Session = Depends(get_db)) -> Response:
    _cross_site(request)
    row = verify_key(db, key.strip())
    if row is None:
        return templates.TemplateResponse(request, "login.html", {"error": "unknown or revoked API key"},
                                          status_code=401)
    settings = request.app.state.settings
    cookie = start_session(db, row.id, settings.session_hours)
    db.commit()
    resp = RedirectResponse("/", status_code=303)
    resp.set_cookie(COOKIE, cookie, max_age=int(settings.session_hours * 3600), httponly=True,
                    secure=settings.cookie_secure, samesite="strict")
    return resp


@router.post("/logout")
def logout(request: Request, db: Session = Depends(get_db)) -> Response:
    """Ends the session on the server too: a copy of the cookie no longer signs anyone in."""
    _cross_site(request)
    if COOKIE in request.cookies:
        end_session(db, request.cookies[COOKIE])
        db.commit()
    resp = RedirectResponse("/login", status_code=303)
    resp.delete_cookie(COOKIE)
    return resp


@router.get("/", response_class=HTMLResponse)
def dashboard(request: Request, db: Session = Depends(get_db)) -> Response:
    value = request.cookies.get(COOKIE)
    row = read_session(db, value) if value else None
    if row is None:
        return RedirectResponse("/login", status_code=303)
    return templates.TemplateResponse(request, "dashboard.html", {"role": row.role})


def _change(metrics: object) -> float | None:
    v = metrics.get("subspace_change") if isinstance(metrics, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


@router.get("/charts/jobs/{job_id}/convergence.svg", dependencies=[Depends(caller)])
def convergence_chart(job_id: str = Path(..., pattern=ID_PATTERN), db: Session = Depends(get_db)) -> Response:
    if db.get(Job, job_id) is None:
        raise HTTPException(404, f"no job {job_id!r}")
    rows = db.execute(select(Round.round, Round.metrics).where(Round.job_id == job_id, Round.phase == "train")
                      .order_by(Round.round)).all()
    svg = line_chart(f"Convergence of {job_id}", [r for r, _ in rows],
                     [_change(m) for _, m in rows], "subspace distance between consecutive Z")
    return Response(svg, media_type="image/svg+xml", headers=SVG_HEADERS)


@router.get("/charts/alerts-per-device.svg", dependencies=[Depends(caller)])
def alerts_chart(db: Session = Depends(get_db)) -> Response:
    rows = db.execute(select(Alert.device_id, func.count()).group_by(Alert.device_id)
                      .order_by(Alert.device_id).limit(60)).all()
    svg = bar_chart("Anomalies per device", [d for d, _ in rows], [n for _, n in rows])
    return Response(svg, media_type="image/svg+xml", headers=SVG_HEADERS)
