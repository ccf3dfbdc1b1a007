"""One settings object for the API, the coordinator and the agent, from FEDSENTRY_* environment variables."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FEDSENTRY_", extra="ignore")

    db_url: str | None = None
    broker_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    retention_days: float | None = None
    cookie_secure: bool = True  # served over HTTPS: Secure cookies and Strict-Transport-Security
    session_hours: float = 12.0
    max_page: int = 500
    max_body_bytes: int = 1 << 20  # larger request bodies get 413 before any route or key check reads them
    # the dashboard's origin (scheme://host[:port]) as browsers see it, when a proxy changes it; by default the
    # request's own scheme and Host header. Cookie-authenticated changes must come from this origin.
    public_origin: str | None = None
