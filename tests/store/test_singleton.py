"""One process of many does what must be done once (store.singleton): PostgreSQL advisory locks on a connection
of the process's own. Another process takes a lock when the holder lets go, and when the holder's connection dies
(a killed coordinator holds nothing); the holder learns that it lost every lock. SQLite serves one coordinator:
always held."""

from __future__ import annotations

import time

from sqlalchemy import text

from store.db import make_engine
from store.singleton import Locks, lock_key


def test_one_holder_at_a_time_and_a_dead_holder_holds_nothing(postgres_url):
    a_engine, b_engine = make_engine(postgres_url), make_engine(postgres_url)
    a, b = Locks(a_engine, recheck=0.1), Locks(b_engine, recheck=0.1)
    try:
        assert a.held("forwarding") and not b.held("forwarding") and b.held("retention")  # one holder a name
        time.sleep(0.15)
        assert a.held("forwarding") and not b.held("forwarding")
        a.release("forwarding")
        time.sleep(0.15)
        assert b.held("forwarding") and not a.held("forwarding")
        # b's connection dies (a killed process, a restarted server): its locks go with it, and it notices
        with a_engine.connect() as c:
            c.execute(text("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                           "AND objid = (:k & 4294967295) AND granted"), {"k": lock_key("forwarding")})
            c.commit()
        time.sleep(0.15)
        assert not b.held("forwarding")  # it notices at its next check, holding nothing any more
        assert not b._held
        time.sleep(0.15)
        assert a.held("forwarding") and not b.held("forwarding")
    finally:
        a.close()
        b.close()
        a_engine.dispose()
        b_engine.dispose()


def test_sqlite_has_one_coordinator(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    assert Locks(engine).held("x") and Locks(engine).held("x")
