"""The dashboard: sign in once with a key, then a session cookie (ended on the server by signing out), and
its page (its charts are api/routes/charts.py)."""

from __future__ import annotations

import ipaddress
from pathlib import Path as _Path

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session

from api.deps import COOKIE, get_db, origin_parts, own_origin, same_origin
from api.security import end_session, read_session, start_session, verify_key

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(_Path(__file__).resolve().parent.parent / "templates"))


def _cross_site(request: Request) -> None:
    """Sign-in and sign-out forms are only accepted from the dashboard's own pages."""
    if "origin" in request.headers and not same_origin(request):
        raise HTTPException(403, "cross-site request refused: sign in and out from the dashboard's own pages")


PLAIN_HTTP = ("Signing in cannot work at this address: the session cookie is Secure, so your browser keeps it "
              "only over HTTPS, and this page came over plain {origin}. Serve the dashboard over HTTPS (a TLS "
              "proxy in front of fedsentry serve, with FEDSENTRY_PUBLIC_ORIGIN=https://<the address you open>), "
              "or, on a trusted network only, start it with fedsentry serve --insecure-cookie.")


def _loopback(host: str) -> bool:
    """Hosts where browsers keep a Secure cookie over plain http (they count as secure contexts)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cookie_dropped(request: Request) -> str | None:
    """Why signing in would fail without a word, if it would: a Secure cookie set over plain http at an
    address that is not loopback, which the browser drops (it is then sent back to /login)."""
    if not request.app.state.settings.cookie_secure:
        return None
    origin = own_origin(request)
    parts = origin_parts(origin)
    if parts is None or parts[0] != "http" or _loopback(parts[1]):
        return None
    return PLAIN_HTTP.format(origin=origin)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    """The sign-in form; its only message is the server's own (no text from the address is shown)."""
    return templates.TemplateResponse(request, "login.html", {"error": _cookie_dropped(request)})


@router.post("/login")
def login(request: Request, key: str = Form(..., max_length=200), db: Session = Depends(get_db)) -> Response:
    """A session cookie for a valid key; 400 with the reason when the browser would drop the cookie."""
    _cross_site(request)
    dropped = _cookie_dropped(request)
    if dropped:
        return templates.TemplateResponse(request, "login.html", {"error": dropped}, status_code=400)
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
    return templates.TemplateResponse(request, "dashboard.html", {"role": row.role, "who": row.name or row.id})
