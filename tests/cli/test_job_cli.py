"""`fedsentry job create`: the same typed settings as the API, errors naming the flag, nothing written on error."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from fedsentry.cli import main


def create(tmp_path, *args: str) -> int:
    return main(["job", "create", "--db", f"sqlite:///{tmp_path}/jobs.db", *args])


def jobs(tmp_path) -> list[tuple]:
    engine = create_engine(f"sqlite:///{tmp_path}/jobs.db")
    with engine.connect() as c:
        rows = list(c.execute(text("SELECT id, type, algorithm, params FROM jobs ORDER BY id")))
    engine.dispose()
    return rows


def test_pca_and_recsys_jobs_with_algorithm_parameters(tmp_path, capsys):
    assert create(tmp_path, "--id", "p1", "--features", "a,b,c,d", "--rank", "2", "--algorithm", "fedpg",
                  "--param", "rho=20", "--param", "aggregator=median") == 0
    assert create(tmp_path, "--id", "r1", "--type", "recsys", "--items", "10,20,30,40", "--rank", "2",
                  "--param", "lam=5") == 0
    assert capsys.readouterr().out.split() == ["p1", "r1"]
    (_, pt, pa, pparams), (_, rt, ra, rparams) = jobs(tmp_path)
    assert (pt, pa, rt, ra) == ("pca", "fedpg", "recsys", "fedmc-admm")
    assert '"rho": 20.0' in pparams and '"aggregator": "median"' in pparams and '"lam": 5.0' in rparams


def test_mixture_job_for_zeek_fields(tmp_path, capsys):
    assert create(tmp_path, "--id", "g1", "--type", "gmm", "--features", "duration,src_bytes,dst_bytes",
                  "--categorical", "proto,service,conn_state", "--flags", "history", "--holdout", "0.25",
                  "--param", "components=16", "--param", "reg=0.01") == 0
    ((_, t, a, params),) = jobs(tmp_path)
    assert (t, a) == ("gmm", "fedem")
    assert '"categorical": ["proto", "service", "conn_state"]' in params and '"flags": ["history"]' in params
    assert '"holdout": 0.25' in params and '"components": 16' in params


PCA3 = ["--type", "pca", "--features", "a,b,c"]  # gmm is the default family: PCA settings name their type


@pytest.mark.parametrize(("args", "message"), [
    ([*PCA3, "--rank", "1", "--param", "rho=3"], "--param rho: not a parameter of fedmm"),
    ([*PCA3, "--rank", "1", "--algorithm", "fedpg", "--param", "local_steps=many"],
     "--param local_steps: expected int"),
    ([*PCA3, "--rank", "1", "--param", "rho"], "--param 'rho': expected NAME=VALUE"),
    ([*PCA3, "--rank", "5"], "--rank: (5) must be smaller than the number of features (3)"),
    (["--type", "recsys", "--rank", "2"], "--items: a recsys job needs the item catalogue"),
    ([*PCA3, "--items", "1,2,3"], "--items: not a setting of a pca job"),
    (["--type", "recsys", "--items", "@/nonexistent/items.txt"], "--items @/nonexistent/items.txt"),
    ([*PCA3, "--rank", "1", "--max-share", "0"], "--max-share: must be in (0, 1]"),
    ([*PCA3, "--rank", "1", "--influence", "nan"], "--influence: expected a finite number"),
    ([*PCA3, "--rank", "1", "--device-trim", "0.5"], "--device-trim: must be in [0, 0.5)"),
    ([*PCA3, "--rank", "1", "--count-cap", "0.5"], "--count-cap: must be between 1 and 10^6"),
    (["--type", "gmm", "--features", "a,b,c", "--holdout", "0.9"], "--holdout: must be in [0.05, 0.5]"),
    (["--type", "gmm", "--features", "a,b,c", "--param", "components=0"], "components must be between 1 and 1024"),
    ([*PCA3, "--rank", "1", "--categorical", "a"], "--categorical: text fields must be distinct"),
    ([*PCA3, "--rank", "1", "--holdout", "0.2"], "--holdout: not a setting of a pca job"),
])
def test_bad_settings_name_the_flag_and_store_nothing(tmp_path, capsys, args, message):
    assert create(tmp_path, "--id", "bad", *args) == 2
    assert message in capsys.readouterr().err
    assert create(tmp_path, "--id", "good", "--features", "a,b,c", "--rank", "1") == 0
    assert [r[0] for r in jobs(tmp_path)] == ["good"]
