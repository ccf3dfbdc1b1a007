"""Job resource caps (issue 24, point 5): a job no deployment could run is refused when it is created, with the
reason in the 422 naming the setting that sizes it; so is a job beyond the pending-jobs cap. Before, an rff job
with 4,096 features and rank 2,100 was accepted and its first round message (> 64 MiB) stalled ingestion, and a
1,024-component mixture was accepted whatever its features."""

from __future__ import annotations

import pytest

from fedsentry.cli import main
from store.jobs import MAX_PENDING_JOBS
from tests.api.conftest import bearer

FEATURES = [f"f{i}" for i in range(100)]


@pytest.mark.parametrize(("body", "field", "problem"), [
    ({"type": "pca", "features": FEATURES[:10], "kernel": "rff", "kernel_features": 4096, "rank": 2100},
     "body.kernel_features", "the job's round message would be 132 MiB, more than a message may carry (64 MiB)"),
    ({"type": "pca", "features": FEATURES[:10], "kernel": "rff", "kernel_features": 2048, "rank": 10},
     "body.kernel_features", "a client step would need about 65 MiB on every agent"),
    ({"type": "gmm", "features": FEATURES, "algorithm_params": {"components": 1024}}, "body.algorithm_params",
     "the job's round message would be 158 MiB"),
    ({"type": "recsys", "items": list(range(120_000)), "rank": 60}, "body.rank",
     "the job's round message would be 112 MiB"),
])
def test_a_job_too_large_to_run_is_refused_naming_what_sizes_it(client, keys, body, field, problem):
    r = client.post("/api/v1/jobs", json=body, headers=bearer(keys["admin"]))
    assert r.status_code == 422, r.text
    assert any(d["field"] == field and problem in d["problem"] for d in r.json()["detail"]), r.json()


def test_the_largest_defaults_still_fit(client, keys):
    for body in ({"type": "pca", "features": FEATURES[:10], "kernel": "rff"},  # 1,000 random Fourier features
                 {"type": "gmm", "features": FEATURES[:39], "algorithm_params": {"components": 1024}},
                 {"type": "gmm", "features": FEATURES}):
        r = client.post("/api/v1/jobs", json=body, headers=bearer(keys["admin"]))
        assert r.status_code == 201, r.text


def test_pending_jobs_are_capped(client, keys, tmp_path, capsys):
    for _ in range(MAX_PENDING_JOBS):
        assert client.post("/api/v1/jobs", json={"features": ["a", "b"]}, headers=bearer(keys["admin"])).status_code \
            == 201
    r = client.post("/api/v1/jobs", json={"features": ["a", "b"]}, headers=bearer(keys["admin"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["problem"].startswith(f"{MAX_PENDING_JOBS} jobs wait for a coordinator already")


def test_the_command_line_names_the_flag(tmp_path, capsys):
    db = f"sqlite:///{tmp_path}/jobs.db"
    assert main(["job", "create", "--db", db, "--type", "pca", "--features", "a,b,c", "--kernel", "rff",
                 "--kernel-features", "4096", "--rank", "2100"]) == 2
    assert "--kernel-features: the job's round message would be 132 MiB" in capsys.readouterr().err


def test_a_differentially_private_job_is_taken_for_pca_and_gmm_on_sums_and_refused_otherwise_by_name(client, keys):
    def post(body):
        return client.post("/api/v1/jobs", json={"features": FEATURES[:10], "dp_epsilon": 4, **body},
                           headers=bearer(keys["admin"]))

    r = post({"type": "dict"})
    assert r.status_code == 422, r.text
    assert any(d["field"] == "body.dp_epsilon" and "PCA and gmm jobs" in d["problem"] for d in r.json()["detail"])
    r = post({"type": "gmm", "algorithm_params": {"splits": 2}})
    assert r.status_code == 422, r.text
    assert any(d["field"] == "body.algorithm_params.splits" and "no swaps" in d["problem"]
               for d in r.json()["detail"]), r.text
    r = post({"type": "gmm", "dp_epsilon": 101})
    assert r.status_code == 422 and any(d["field"] == "body.dp_epsilon" for d in r.json()["detail"]), r.text
    r = post({"type": "gmm"})
    assert r.status_code == 201, r.text
    assert r.json()["params"]["dp_epsilon"] == 4 and r.json()["params"]["private"] is False
    r = post({"type": "pca", "algorithm": "fedpg"})
    assert r.status_code == 422, r.text
    assert any(d["field"] == "body.algorithm" and "fedmm" in d["problem"] for d in r.json()["detail"])
    r = post({"type": "pca", "algorithm": "fedmm", "dp_epsilon": 0})
    assert r.status_code == 422 and any(d["field"] == "body.dp_epsilon" for d in r.json()["detail"]), r.text
    r = post({"type": "pca", "algorithm": "fedmm", "private": True})
    assert r.status_code == 201, r.text
    assert r.json()["params"]["dp_epsilon"] == 4 and r.json()["params"]["private"] is True
