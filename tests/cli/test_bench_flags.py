"""`fedsentry bench ingest` and `bench api` refuse bad settings by name, not with a traceback (the ingest run itself
is timed in tests/integration/test_rabbitmq_cluster.py)."""

from __future__ import annotations

import pytest

from fedsentry.cli import main

PG = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.mark.parametrize("flags, says", [
    (["--queue", "http://user:secret@host/", "--postgres", PG], "--queue: http://host... is not an AMQP URL"),
    (["--queue", "amqp://guest:guest@127.0.0.1:5672/", "--postgres", "sqlite:///x.db"],
     "--postgres: a PostgreSQL server's URL"),
    (["--queue", "amqp://guest:guest@127.0.0.1:5672/", "--postgres", PG, "--workers", "0"],
     "--workers: must be at least 1"),
])
def test_bad_settings_are_refused_naming_the_flag(flags, says, capsys):
    assert main(["bench", "ingest", *flags]) == 2
    err = capsys.readouterr().err
    assert says in err and "secret" not in err


def test_a_queue_nobody_answers_is_named(postgres_url, capsys, tmp_path):
    """The scratch database is made and dropped again; the error names the address (port 1: nothing listens)."""
    assert main(["bench", "ingest", "--queue", "amqp://guest:guest@127.0.0.1:1/", "--postgres", postgres_url,
                 "--alerts", "10", "--workers", "1", "--out", str(tmp_path)]) == 2
    assert "--queue: no RabbitMQ answers at 127.0.0.1:1" in capsys.readouterr().err



@pytest.mark.parametrize("flags, says", [
    (["--postgres", "x"], "--postgres: Could not parse"),
    (["--db", "postgresql://postgres@127.0.0.1:1/x"], "--db: connection failed"),
])
def test_bench_api_names_a_database_it_cannot_use(flags, says, capsys):
    assert main(["bench", "api", "--alerts", "10", *flags]) == 2
    assert says in capsys.readouterr().err


def test_bench_api_partitions_only_postgresql(capsys):
    assert main(["bench", "api", "--alerts", "10", "--partitioned"]) == 2
    assert "--partitioned: alerts are partitioned on PostgreSQL only" in capsys.readouterr().err


def test_bench_api_partitioned_times_alerts_partitioned_by_day(postgres_url, tmp_path):
    """The fresh database's alerts are partitioned before loading (store.partitions), and the run says so."""
    import json

    from sqlalchemy import text

    from store import partitions
    from store.db import make_engine

    out = tmp_path / "api.json"
    assert main(["bench", "api", "--alerts", "300", "--devices", "10", "--repeat", "1", "--db", postgres_url,
                 "--partitioned", "--out", str(tmp_path), "--json", str(out)]) == 0
    assert list(json.loads(out.read_text())["databases"]) == ["postgresql partitioned"]
    engine = make_engine(postgres_url)
    with engine.connect() as c:
        assert partitions.partitioned(c) and len(partitions.days(c)) > 25
        assert c.execute(text("SELECT count(*) FROM alerts")).scalar() > 0
    engine.dispose()


def test_bench_api_reuse_times_the_alerts_a_run_left(postgres_url, tmp_path, capsys):
    """--reuse times a database an earlier run filled, storing nothing more; another fleet's size is refused, and
    so is a database that outlives no run."""
    import json

    from sqlalchemy import text

    from store.db import make_engine

    args = ["bench", "api", "--alerts", "300", "--devices", "10", "--repeat", "1", "--db", postgres_url,
            "--out", str(tmp_path)]
    assert main([*args, "--json", str(tmp_path / "first.json")]) == 0
    assert "stored 300 alerts" in capsys.readouterr().err
    assert main([*args, "--reuse", "--json", str(tmp_path / "again.json")]) == 0  # its checks held: the same fleet
    assert "stored 300 alerts" not in capsys.readouterr().err
    assert json.loads((tmp_path / "again.json").read_text())["databases"]["postgresql"]
    engine = make_engine(postgres_url)
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM alerts")).scalar() == 300
    engine.dispose()
    assert main([*args[:2], "--alerts", "200", *args[4:], "--reuse"]) == 2
    assert "holds 300 alerts of 10 devices, not 200 of 10" in capsys.readouterr().err
    assert main(["bench", "api", "--alerts", "10", "--reuse"]) == 2
    assert "--reuse: only a --db URL outlives a run" in capsys.readouterr().err


@pytest.mark.parametrize("flags, says", [
    ([], "--bulk: COPY into PostgreSQL only"),
    (["--db", "postgresql://postgres@127.0.0.1:1/x", "--partitioned"], "--bulk: alerts partitioned by day are not"),
])
def test_bench_api_bulk_loads_postgresql_alone(flags, says, capsys):
    assert main(["bench", "api", "--alerts", "10", "--bulk", *flags]) == 2
    assert says in capsys.readouterr().err
