"""One process of many does what must be done once (store.singleton): a PostgreSQL advisory lock on a connection
of its own. Another process takes it when the holder lets go, and when the holder's connection dies (a killed
coordinator holds nothing); the holder learns it lost the lock. SQLite serves one coordinator: always held."""

from __future__ import annotations

import time

from sqlalchemy import text

from store.db import make_engine
from store.singleton import Singleton


def test_one_holder_at_a_time_and_a_dead_holder_holds_nothing(postgres_url):
    a_engine, b_engine = make_engine(postgres_url), make_engine(postgres_url)
    a, b = Singleton(a_engine, "forwarding", recheck=0.1), Singleton(b_engine, "forwarding", recheck=0.1)
    other = Singleton(b_engine, "retention", recheck=0.1)
    try:
        assert a.held() and not b.held() and other.held()  # one name, one holder; another name is another lock
        time.sleep(0.15)
        assert a.held() and not b.held()
        a.release()
        time.sleep(0.15)
        assert b.held() and not a.held()
        # the holder's connection dies (a killed process, a restarted server): the lock goes with it
        with a_engine.connect() as c:
            c.execute(text("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                           "AND objid = (:k & 4294967295) AND granted"), {"k": b.key})
            c.commit()
        time.sleep(0.15)
        assert not b.held()  # it notices
        time.sleep(0.15)
        assert a.held()
    finally:
        for s in (a, b, other):
            s.release()
        a_engine.dispose()
        b_engine.dispose()


def test_sqlite_has_one_coordinator(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    assert Singleton(engine, "x").held() and Singleton(engine, "x").held()
