"""Fixtures of the forwarding tests: a migrated SQLite database, and retries quick enough for a test."""

from __future__ import annotations

import pytest

from coordinator import forward
from store.db import make_engine, migrate, session_factory


@pytest.fixture
def sessions(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/f.db")
    migrate(engine)
    yield session_factory(engine)
    engine.dispose()


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(forward, "BACKOFF", (0.05, 0.2))
    monkeypatch.setattr(forward, "POLL", 0.05)
