"""Secrets on disk and in the process table: the database (it holds the cookie-signing key), the agent's
state folder, and the broker password, which reaches neither a log nor a command line."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.broker import EmbeddedBroker, free_port
from store.db import make_engine, migrate
from tests.integration.conftest import wait_until


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # the usual umask, under which SQLite would make the file 0644
    yield
    os.umask(old)


def test_the_api_and_the_coordinator_create_the_database_for_their_user_only(tmp_path, umask_022):
    from api.app import create_app
    from api.security import create_key
    from api.settings import Settings
    from coordinator.service import Coordinator

    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/api.db"))
    with app.state.sessions.begin() as s:  # a write, with the pool's connection kept open: -wal and -shm exist
        create_key(s, "viewer")
    Coordinator(f"mqtt://127.0.0.1:{free_port()}", f"sqlite:///{tmp_path}/coord.db").close()
    files = sorted(tmp_path.glob("*.db*"))
    assert {f.name for f in files} >= {"api.db", "api.db-wal", "api.db-shm", "coord.db"}
    assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_the_cli_creates_the_database_for_its_user_only(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "apikey", "create", "--role", "admin", "--db",
                          f"sqlite:///{tmp_path}/cli.db"], capture_output=True, text=True, timeout=60,
                         preexec_fn=lambda: os.umask(0o022))
    assert out.returncode == 0, out.stderr
    assert mode(tmp_path / "cli.db") == 0o600


def test_an_existing_database_open_to_others_is_narrowed_with_a_warning(tmp_path, caplog, umask_022):
    db = tmp_path / "old.db"
    migrate(make_engine(f"sqlite:///{db}"))
    for f in tmp_path.glob("old.db*"):
        f.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="fedsentry.db"):
        make_engine(f"sqlite:///{db}").dispose()
    assert {f.name: mode(f) for f in tmp_path.glob("old.db*")} == {f.name: 0o600 for f in tmp_path.glob("old.db*")}
    assert "readable by others" in caplog.text and "old.db" in caplog.text


def agent(broker: EmbeddedBroker, tmp: Path, name: str, url: str, env: dict[str, str]) -> subprocess.Popen:
    log = open(tmp / f"{name}.log", "w")  # noqa: SIM115 - the process owns it
    return subprocess.Popen([sys.executable, "-m", "fedsentry.cli", "-v", "agent", "--broker", url, "--id", name,
                             "--state-dir", str(tmp / name)], stdout=subprocess.DEVNULL, stderr=log,
                            env={**os.environ, **env})


def test_the_broker_password_reaches_no_log_and_no_command_line(tmp_path, umask_022):
    """An agent given its password by file or environment (as the systemd unit and the demo do) keeps it
    out of its argv; one given a password in the URL is warned and its log shows the URL redacted. Each
    connects (the coordinator's user sees it online), so the password was really used."""
    from coordinator.service import Coordinator

    broker = EmbeddedBroker(devices=["dev-file", "dev-env", "dev-url"]).start()
    coord = Coordinator(broker.url, f"sqlite:///{tmp_path}/c.db", username=broker.username,
                        password=broker.password).start()
    procs = {}
    try:
        procs["dev-file"] = agent(broker, tmp_path, "dev-file", broker.url, broker.credentials_env("dev-file"))
        procs["dev-env"] = agent(broker, tmp_path, "dev-env", broker.url, {
            "FEDSENTRY_MQTT_USERNAME": "dev-env", "FEDSENTRY_MQTT_PASSWORD": broker.passwords["dev-env"]})
        url = broker.url.replace("mqtt://", f"mqtt://dev-url:{broker.passwords['dev-url']}@")
        procs["dev-url"] = agent(broker, tmp_path, "dev-url", url, {})
        wait_until(lambda: set(coord.online_devices()) >= set(procs), 30, "the three agents online")
        for name, p in procs.items():
            secret = broker.passwords[name]
            cmdline = Path(f"/proc/{p.pid}/cmdline").read_bytes().decode()
            assert (secret in cmdline) == (name == "dev-url"), name  # only where the user put it
            assert mode(tmp_path / name) == 0o700  # the agent's state folder is its own
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(10)
        coord.close()
        broker.stop()
    for name in procs:
        log = (tmp_path / f"{name}.log").read_text()
        assert "starting" in log and broker.passwords[name] not in log, log
    assert "dev-url:***@127.0.0.1" in (tmp_path / "dev-url.log").read_text()
    assert "a password in --broker is visible" in (tmp_path / "dev-url.log").read_text()


def test_the_demo_gives_its_agents_their_password_through_the_environment(tmp_path):
    from fedsentry.demo.stack import Stack

    with Stack(None, f"sqlite:///{tmp_path}/d.db", "test", agents=1) as st:
        assert st.broker is not None
        st.agent(0)
        st.wait_online("pca", timeout=30)
        pid = st.procs[0].pid
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode()
        secret = st.broker.passwords[st.ids[0]]
        assert secret not in cmdline and st.broker.password not in cmdline
        assert str(st.broker.password_file(st.ids[0])) in environ
