"""`fedsentry job list|show|cancel`: the API's job layer from the command line; time filters honour offsets."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import create_engine, text

from fedsentry.cli import main


@pytest.fixture
def db(tmp_path, capsys) -> str:
    """Three jobs created at 08:30, 09:30 and 10:30 UTC on 2026-11-23, one with two rounds."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    assert main(["job", "create", "--db", url, "--id", "p1", "--features", "a,b,c", "--rank", "1"]) == 0
    assert main(["job", "create", "--db", url, "--id", "r1", "--type", "recsys", "--items", "10,20,30",
                 "--rank", "2"]) == 0
    assert main(["job", "create", "--db", url, "--id", "g1", "--type", "gmm", "--features", "a,b"]) == 0
    engine = create_engine(url)
    with engine.begin() as c:
        for job, hour in (("p1", "08"), ("r1", "09"), ("g1", "10")):
            c.execute(text("UPDATE jobs SET created = :t WHERE id = :id"), {"t": f"2026-11-23 {hour}:30:00.000000",
                                                                            "id": job})
        c.execute(text("UPDATE jobs SET status = 'running', current_round = 2 WHERE id = 'r1'"))
        for r in (1, 2):
            c.execute(text("INSERT INTO rounds (job_id, round, phase, sampled, answered, metrics, seconds, completed) "
                           "VALUES ('r1', :r, 'train', '[\"a\", \"b\"]', '[\"a\"]', :m, 0.5, '2026-11-23')"),
                      {"r": r, "m": json.dumps({"test_rmse": 1.0 / r})})
    engine.dispose()
    capsys.readouterr()
    return url


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["job", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def listed(capsys, db: str, *args: str) -> list[str]:
    code, out, err = run(capsys, "list", "--db", db, "--json", *args)
    assert code == 0, err
    return [j["id"] for j in json.loads(out)]


def test_list_is_a_table_newest_first(db, capsys):
    code, out, _ = run(capsys, "list", "--db", db)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["ID", "TYPE", "ALGORITHM", "STATUS"]
    assert [line.split()[0] for line in lines[1:]] == ["g1", "r1", "p1"]
    assert lines[2].split()[:6] == ["r1", "recsys", "fedmc-admm", "running", "waiting", "2"]
    assert "2026-11-23 09:30:00" in lines[2]
    assert listed(capsys, db, "--status", "pending") == ["g1", "p1"]
    assert listed(capsys, db, "--limit", "1") == ["g1"]


@pytest.mark.parametrize(("args", "ids"), [
    (["--since", "2026-11-23T10:00:00+01:00"], ["g1", "r1"]),  # 09:00 UTC
    (["--since", "2026-11-23T10:00:00"], ["g1"]),  # naive: UTC
    (["--since", "2026-11-23T10:00:00Z"], ["g1"]),
    (["--until", "2026-11-23T10:30:00+01:00"], ["p1"]),  # 09:30 UTC, excluded
    (["--until", "2026-11-23T05:00:00-05:00"], ["r1", "p1"]),  # 10:00 UTC
    (["--since", "2026-11-23T08:00:00+00:00", "--until", "2026-11-23T11:00:00+01:00"], ["r1", "p1"]),
    (["--since", "2026-11-24"], []),
])
def test_since_and_until_honour_time_zone_offsets(db, capsys, args, ids):
    assert listed(capsys, db, *args) == ids


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "yesterday"], "argument --since: expected an ISO 8601 time"),
    (["--until", "2026-13-01T00:00:00"], "argument --until: expected an ISO 8601 time"),
    (["--since", "2026-11-23T10:00:00+01:00", "--until", "2026-11-23T09:00:00"], "--since must be before --until"),
])
def test_bad_times_name_the_flag(db, capsys, args, message):
    code, _, err = run(capsys, "list", "--db", db, *args)
    assert code == 2 and message in err


def test_show_gives_settings_and_rounds(db, capsys):
    code, out, _ = run(capsys, "show", "r1", "--db", db)
    assert code == 0 and "items=[10,20,30]" in out and "rank=2" in out
    rounds = out[out.index("\nROUND") + 1:].splitlines()
    assert rounds[1].split() == ["1", "train", "2", "1", "0.50", "test_rmse=1"]
    assert rounds[2].split()[-1] == "test_rmse=0.5"
    code, out, _ = run(capsys, "show", "p1", "--db", db)
    assert code == 0 and "no rounds yet" in out
    code, out, _ = run(capsys, "show", "r1", "--db", db, "--json")
    job = json.loads(out)
    assert (job["status"], job["created"], job["params"]["items"]) == ("running", "2026-11-23T09:30:00+00:00",
                                                                         ["10", "20", "30"])
    assert [r["answered"] for r in job["rounds"]] == [1, 1]
    code, _, err = run(capsys, "show", "nope", "--db", db)
    assert code == 2 and "no job 'nope'" in err


def test_cancel_pending_and_running_jobs_only(db, capsys):
    code, out, _ = run(capsys, "cancel", "r1", "--db", db, "--json")
    assert code == 0 and json.loads(out)["status"] == "cancelled"
    assert run(capsys, "cancel", "p1", "--db", db)[0] == 0
    assert listed(capsys, db, "--status", "cancelled") == ["r1", "p1"]
    code, _, err = run(capsys, "cancel", "p1", "--db", db)
    assert code == 2 and "job 'p1' is cancelled; only pending or running jobs can be cancelled" in err
    code, _, err = run(capsys, "cancel", "nope", "--db", db)
    assert code == 2 and "no job 'nope'" in err
    assert listed(capsys, db, "--status", "pending") == ["g1"]
