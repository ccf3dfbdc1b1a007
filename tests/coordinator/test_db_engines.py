"""A second engine on the same SQLite file must not drop the first one's locks (POSIX locks are per process):
another process would then delete the WAL file the first engine still writes to, losing its writes."""

import subprocess
import sys

from sqlalchemy import text

from store.db import make_engine


def test_a_second_engine_keeps_the_wal_of_the_first(tmp_path):
    db = tmp_path / "x.db"
    first = make_engine(f"sqlite:///{db}")
    with first.begin() as c:
        c.execute(text("CREATE TABLE t (n INTEGER)"))
    conn = first.connect()  # held open, as the coordinator's pool holds its connections
    conn.execute(text("SELECT count(*) FROM t")).scalar()
    conn.commit()
    second = make_engine(f"sqlite:///{db}")  # as the demo's API does beside its coordinator
    subprocess.run([sys.executable, "-c", f"import sqlite3; c = sqlite3.connect({str(db)!r}); "
                    "c.execute('SELECT count(*) FROM t').fetchone(); c.close()"], check=True)
    assert db.with_name("x.db-wal").exists()  # the other process did not take it for the last user
    conn.execute(text("INSERT INTO t VALUES (1)"))
    conn.commit()
    out = subprocess.run([sys.executable, "-c", f"import sqlite3; print(sqlite3.connect({str(db)!r})"
                          ".execute('SELECT count(*) FROM t').fetchone()[0])"], capture_output=True, text=True)
    assert out.stdout.strip() == "1"
    conn.close()
    first.dispose()
    second.dispose()
