"""`fedsentry feedback` on the database: add (one target, a reason; what cannot work names its flag), list (the
audit, with the effect the device reported), remove (recorded)."""

from __future__ import annotations

from store.db import Alert, make_engine, migrate, session_factory, utcnow
from tests.cli.test_suppress_cli import fs


def test_add_list_remove(tmp_path):
    db = f"sqlite:///{tmp_path}/f.db"
    engine = make_engine(db)
    migrate(engine)
    with session_factory(engine).begin() as s:
        s.add(Alert(id="a1", device_id="cam-1", job_id="job-1", model_version=3, ts=utcnow(), score=4.5,
                    threshold=3.0, explanation=[]))
    engine.dispose()
    added = fs("feedback", "add", "--alert", "a1", "--reason", "the NAS backup", "--by", "bob", "--db", db)
    assert added.returncode == 0, added.stderr
    fid = added.stdout.strip()
    assert "1 records of device cam-1" in added.stderr
    listed = fs("feedback", "list", "--db", db).stdout.splitlines()
    assert listed[0].startswith("id\t") and fid in listed[1]
    assert "\tbob\tactive\tcam-1\talert a1\t1\tnot reported yet\tthe NAS backup" in listed[1]
    again = fs("feedback", "add", "--alert", "a1", "--reason", "x", "--db", db)
    assert again.returncode == 2 and "--alert: alert a1 is marked already" in again.stderr
    assert fs("feedback", "remove", fid, "--by", "carol", "--db", db).returncode == 0
    assert "\tremoved by carol\t" in fs("feedback", "list", "--device", "cam-1", "--db", db).stdout
    missing = fs("feedback", "add", "--incident", "0" * 20, "--reason", "x", "--db", db)
    assert missing.returncode == 2 and "no incident" in missing.stderr
    blank = fs("feedback", "add", "--alert", "a1", "--reason", " ", "--db", db)
    assert blank.returncode == 2 and "--reason" in blank.stderr
    both = fs("feedback", "add", "--alert", "a1", "--incident", "x", "--reason", "x", "--db", db)
    assert both.returncode == 2 and "not allowed with" in both.stderr
    assert fs("feedback", "remove", "0" * 32, "--db", db).returncode == 2
