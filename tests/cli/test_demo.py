"""`fedsentry demo` end to end: embedded broker, or a separately started Mosquitto."""

import json
import os
import signal
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
    assert demo["flagged_records_counted"] == demo["records_flagged"]  # every flagged record, in incidents
    assert demo["records_scored"] == sim["n_test"]
    assert abs(demo["auc_roc"] - sim["auc_roc"]) < 1e-6 and demo["mixture_mean_difference"] < 1e-6
    assert abs(demo["threshold"] - sim["threshold"]) < 1e-6 * sim["threshold"]
    # each agent flags at its own threshold, shrunk toward the fleet's, exactly as the simulator's devices
    assert demo["recall"] == sim["recall"] == demo["simulate_recall"]
    assert demo["false_positive_rate"] == sim["false_positive_rate"]


def test_a_compliant_rogue_among_real_agents_does_what_the_simulator_says(tmp_path):
    """Issue 22: the compliant rogue is the unchanged agent program fed attack traffic as training records;
    over MQTT it gives what `simulate --adversaries 1 --attack compliant` gives, test attacks reaching the
    honest agents. Attacks that forge uploads need a modified agent and are refused, saying where to run them."""
    settings = ["--dataset", "synthetic", "--rounds", "5", "--fraction", "0.5", "--seed", "2", "--components", "4",
                "--adversaries", "1", "--attack", "compliant"]
    demo = run("demo", "--agents", "5", *settings, "--db", f"sqlite:///{tmp_path}/d.db", "--json", "-", cwd=tmp_path)
    sim = run("simulate", "pca", "--clients", "5", *settings, "--json", "-", cwd=tmp_path)
    assert sim["adversaries"] == 1 and demo["mixture_mean_difference"] < 1e-6
    assert demo["recall"] == sim["recall"] and abs(demo["auc_roc"] - sim["auc_roc"]) < 1e-6
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "demo", "--agents", "5", "--adversaries", "1",
                          "--attack", "non-psd"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "--attack non-psd" in out.stderr and "bench robustness" in out.stderr


def test_demo_matches_simulate_on_the_embedded_broker(tmp_path):
    from coordinator.broker import free_port

    # a port of its own (not 8000, which another demo beside this test may hold: then 'stopped' cannot be told)
    demo = run("demo", "--agents", "4", *SETTINGS, "--db", f"sqlite:///{tmp_path}/d.db", "--json", "-",
               "--port", str(free_port()), cwd=tmp_path)
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
        broker.close()
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


def demo_env(tmp_path) -> dict[str, str]:
    """TMPDIR in tmp_path: the demo's work folder lands where the test can look for it. PYTHONPATH: the code
    of this checkout runs, not that of wherever fedsentry is installed from (the demo runs in tmp_path)."""
    import os
    from pathlib import Path

    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def ctrl_c_reaches_it() -> None:
    """In the child before it runs: SIGINT back to its default, so that Python turns it into KeyboardInterrupt.
    A suite started in the background (`cmd &` in a script, as CI may run it) hands its children SIGINT ignored,
    and a demo started so keeps serving through Ctrl-C, as a background job should."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def work_folders(tmp_path) -> list:
    return sorted((tmp_path / "tmp").glob("fedsentry-demo-*"))


QUICK = ["--dataset", "synthetic", "--rounds", "2", "--fraction", "1", "--components", "2"]


def test_demo_removes_its_work_folder_and_reuses_its_admin_key(tmp_path):
    import re

    from coordinator.broker import free_port

    db, env, keys = f"sqlite:///{tmp_path}/d.db", demo_env(tmp_path), []
    port = free_port()
    for extra in (["--clients", "2", "--port", str(port)], ["--agents", "2", "--keep-work"]):
        out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "demo", *QUICK, *extra, "--db", db, "--json", "-"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        keys += re.findall(r"admin key (fsk_\w+)", out.stderr)
        result = json.loads(out.stdout)
        assert result["agents"] == 2
        if "--port" in extra:  # the dashboard where asked, the work folder gone
            assert result["dashboard"] == f"http://127.0.0.1:{port}/"
            assert result["work_folder"] is None and work_folders(tmp_path) == []
    assert work_folders(tmp_path) == [tmp_path / "tmp" / result["work_folder"].rsplit("/", 1)[-1]]
    assert (work_folders(tmp_path)[0] / "agent-0.log").exists()
    assert len(keys) == 2 and keys[0] == keys[1]
    from sqlalchemy import create_engine, text

    engine = create_engine(db)
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM api_keys")).scalar() == 1
    engine.dispose()


def test_demo_admin_key_is_replaced_only_once_revoked(tmp_path):
    from fedsentry.demo.stack import demo_admin_key
    from store.db import ApiKey, make_engine, migrate, session_factory

    engine = make_engine(f"sqlite:///{tmp_path}/k.db")
    migrate(engine)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        first = demo_admin_key(s)
    with sessions.begin() as s:
        assert demo_admin_key(s) == first
        s.get(ApiKey, first.split("_")[1]).revoked = True
    with sessions.begin() as s:
        second = demo_admin_key(s)
    with sessions.begin() as s:
        assert second != first and demo_admin_key(s) == second and s.query(ApiKey).count() == 2
    engine.dispose()


@pytest.mark.parametrize(("args", "message"), [
    (["--clients", "3", "--agents", "4"], "--clients 3 and --agents 4 disagree"),
    (["--port", "70000"], "--port 70000: a port is at most 65535"),
    (["--host", "203.0.113.1"], "--host/--port: cannot serve the dashboard on 203.0.113.1"),
])
def test_demo_refuses_conflicting_or_unusable_settings(tmp_path, args, message):
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "demo", *QUICK, *args, "--db",
                          f"sqlite:///{tmp_path}/d.db"], capture_output=True, text=True, cwd=tmp_path,
                         env=demo_env(tmp_path), timeout=300)
    assert out.returncode == 2 and message in out.stderr
    assert work_folders(tmp_path) == []


def test_keep_serving_keeps_the_agents_online_for_a_new_job(tmp_path):
    import signal
    import time

    import httpx
    from sqlalchemy import create_engine, text

    from coordinator.broker import free_port
    from fedsentry.cli import main

    db, port = f"sqlite:///{tmp_path}/d.db", free_port()
    with open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "demo", "--agents", "3", *QUICK,
                                 "--keep-serving", "--host", "127.0.0.1", "--port", str(port), "--db", db],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path, env=demo_env(tmp_path),
                                preexec_fn=ctrl_c_reaches_it)
    try:
        end = time.monotonic() + 240
        while "serving until interrupted" not in (tmp_path / "err.txt").read_text():
            assert proc.poll() is None and time.monotonic() < end, (tmp_path / "err.txt").read_text()[-2000:]
            time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        engine = create_engine(db)
        with engine.connect() as c:
            online = c.execute(text("SELECT id FROM devices WHERE online")).scalars().all()
            features = json.loads(c.execute(text("SELECT params FROM jobs")).scalar_one())["features"]
        engine.dispose()
        assert sorted(online) == [f"demo-agent-{i:03d}" for i in range(3)]
        assert main(["job", "create", "--db", db, "--id", "again", "--type", "gmm", "--features", ",".join(features),
                     "--rounds", "2", "--fraction", "1", "--min-agents", "3", "--param", "components=2"]) == 0
        while True:
            engine = create_engine(db)
            with engine.connect() as c:
                status = c.execute(text("SELECT status FROM jobs WHERE id = 'again'")).scalar_one()
            engine.dispose()
            if status in ("finished", "failed"):
                break
            assert time.monotonic() < end + 120, status
            time.sleep(0.5)
        assert status == "finished"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # what it waits on: every thread's stack (fedsentry's SIGUSR1)
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            proc.kill()
            proc.wait()
            raise AssertionError("the demo did not stop within 120 s of Ctrl-C; its stderr ends: "
                                 + (tmp_path / "err.txt").read_text()[-6000:]) from None
        assert code == 0
    assert len(work_folders(tmp_path)) == 1  # kept under --keep-serving


def _processes_naming(folder) -> list[int]:
    """Processes whose command line names `folder` (the demo's agents: --state-dir FOLDER/agent-i)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if str(folder).encode() in f.read():
                        pids.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return pids


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has stopped
    except OSError:
        return False


@pytest.mark.parametrize("keep", [False, True], ids=["removes", "keep-work"])
def test_sigterm_stops_the_agents_and_removes_the_work_folder(tmp_path, keep):
    """`kill PID` cleans up as Ctrl-C does: the agents stop, the work folder goes (unless --keep-work)."""
    from tests.integration.conftest import wait_until

    errors = tmp_path / "demo.err"
    with errors.open("w") as err:  # rounds enough that the job is still training when it is stopped
        demo = subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "demo", "--agents", "2", *QUICK, "--rounds",
                                 "500", "--db", f"sqlite:///{tmp_path}/d.db", *(["--keep-work"] if keep else [])],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path, env=demo_env(tmp_path))
    agents: list[int] = []
    try:
        wait_until(lambda: "round 2" in errors.read_text() or demo.poll() is not None, 60, "the job's rounds")
        assert demo.poll() is None, errors.read_text()[-2000:]
        (folder,) = work_folders(tmp_path)
        agents = _processes_naming(folder)
        assert len(agents) == 2 and all(map(_running, agents))
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 143, errors.read_text()[-2000:]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        left = [pid for pid in agents if _running(pid)]
        for pid in left:  # not to leave them running when this fails
            os.kill(pid, signal.SIGKILL)
    assert left == []
    assert "fedsentry: terminated (SIGTERM)" in errors.read_text()
    assert work_folders(tmp_path) == ([folder] if keep else [])
