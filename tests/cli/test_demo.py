"""`fedsentry demo` end to end: embedded broker, or a separately started Mosquitto."""

import json
import subprocess
import sys

import pytest

from tests.integration.conftest import HAVE_MOSQUITTO


def run(*args, cwd):
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", *args], capture_output=True, text=True,
                         cwd=cwd, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


SETTINGS = ["--dataset", "synthetic", "--rounds", "6", "--fraction", "0.5", "--detector", "pca", "--algorithm",
            "fedmm", "--seed", "1"]


def test_default_demo_is_the_mixture_and_matches_simulate(tmp_path):
    settings = ["--dataset", "synthetic", "--rounds", "5", "--fraction", "0.5", "--seed", "2", "--components", "4"]
    demo = run("demo", "--agents", "4", *settings, "--db", f"sqlite:///{tmp_path}/d.db", "--json", "-", cwd=tmp_path)
    sim = run("simulate", "pca", "--detector", "gmm", "--clients", "4", *settings, "--json", "-", cwd=tmp_path)
    assert demo["algorithm"] == "fedem" and demo["rounds_completed"] == 5 and demo["alerts_stored"] > 0
    assert demo["records_scored"] == sim["n_test"]
    assert abs(demo["auc_roc"] - sim["auc_roc"]) < 1e-6 and demo["mixture_mean_difference"] < 1e-6
    assert abs(demo["threshold"] - sim["threshold"]) < 1e-6 * sim["threshold"]


def test_demo_matches_simulate_on_the_embedded_broker(tmp_path):
    demo = run("demo", "--agents", "4", *SETTINGS, "--db", f"sqlite:///{tmp_path}/d.db", "--json", "-", cwd=tmp_path)
    sim = run("simulate", "pca", "--clients", "4", *SETTINGS, "--json", "-", cwd=tmp_path)
    assert demo["rounds_completed"] == 6 and demo["agents"] == 4 and demo["alerts_stored"] > 0
    assert demo["records_scored"] == sim["n_test"]
    assert abs(demo["auc_roc"] - sim["auc_roc"]) < 1e-9
    assert abs(demo["subspace_distance"] - sim["subspace_distance"]) < 1e-6
    assert demo["seconds_per_round"] > 0
    import httpx

    assert demo["dashboard"].startswith("http://127.0.0.1:")  # served while the demo ran (stopped now)
    with pytest.raises(httpx.ConnectError):
        httpx.get(demo["dashboard"] + "healthz", timeout=2)


@pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed")
def test_demo_against_a_separately_started_mosquitto(tmp_path):
    from coordinator.broker import Mosquitto

    broker = Mosquitto().start()
    try:
        demo = run("demo", "--agents", "3", *SETTINGS, "--broker", broker.url, "--db",
                   f"sqlite:///{tmp_path}/d.db", "--json", "-", cwd=tmp_path)
    finally:
        broker.stop()
    assert demo["rounds_completed"] == 6 and demo["broker"] == broker.url


def test_demo_reports_an_unreachable_broker(tmp_path):
    from coordinator.broker import free_port

    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "demo", "--agents", "2", "--dataset", "synthetic",
                          "--broker", f"mqtt://127.0.0.1:{free_port()}", "--db", f"sqlite:///{tmp_path}/d.db"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 2 and "cannot reach the MQTT broker" in out.stderr


def test_recsys_demo_matches_simulate(tmp_path):
    settings = ["--dataset", "synthetic", "--rounds", "6", "--fraction", "0.5", "--algorithm", "fedmc-admm",
                "--rank", "5"]
    demo = run("demo", "--job", "recsys", "--agents", "4", *settings, "--db", f"sqlite:///{tmp_path}/d.db",
               "--json", "-", cwd=tmp_path)
    sim = run("simulate", "recsys", "--clients", "4", *settings, "--json", "-", cwd=tmp_path)
    assert demo["rounds_completed"] == 6 and demo["agents"] == 4
    assert abs(demo["test_rmse"] - sim["test_rmse"]) < 1e-9
