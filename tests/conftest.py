"""Shared fixtures. Real data tests skip (saying so) where ../shared/data is absent."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import pytest

from fedsentry.data import datasets


@contextmanager
def _locked(path: Path, exclusive: bool) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under pytest-xdist (pyproject's addopts), a test marked `alone` (it asserts a bound that load moves: a
    wall-clock time, an agent's memory) runs with no other test beside it: it holds the run's lock exclusively, every
    other test holds it shared, from its first fixture's set-up (module and session fixtures included) to its last
    teardown. A gate taken before the lock keeps the other worker from starting new tests while an `alone` test
    waits, so it waits one test at most."""
    if not hasattr(item.config, "workerinput"):  # one process: nothing runs beside anything
        return (yield)
    shared = Path(item.config.option.basetemp).parent  # xdist gives each worker <the run's basetemp>/popen-gwN
    alone = item.get_closest_marker("alone") is not None
    with ExitStack() as held:
        with _locked(shared / "alone.gate", exclusive=alone):
            held.enter_context(_locked(shared / "alone.lock", exclusive=alone))
        return (yield)


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
