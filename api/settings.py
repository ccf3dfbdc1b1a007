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
    cookie_secure: bool = True
    session_hours: float = 12.0
    max_page: int = 500
