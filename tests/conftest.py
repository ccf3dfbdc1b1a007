"""Shared fixtures. Real data tests skip (saying so) where ../shared/data is absent."""

from __future__ import annotations

import numpy as np
import pytest

from fedsentry.data import datasets


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def needs_dataset(name: str):
    return pytest.mark.skipif(not datasets.shared_data_available(name),
                              reason=f"shared dataset {name!r} not found under {datasets.data_dir()}")


def _postgres_reachable() -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", 5432)) == 0


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database on 127.0.0.1:5432, dropped afterwards."""
    if not _postgres_reachable():
        pytest.skip("no PostgreSQL server on 127.0.0.1:5432")
    import uuid

    from sqlalchemy import create_engine, text

    name = f"fedsentry_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
