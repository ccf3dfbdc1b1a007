"""`fedsentry agent --broker-file`: the embedded broker's URL read from the file `serve` keeps in its state folder,
so that no port is copied by hand (issue 28, "your own fleet")."""

from __future__ import annotations

import stat

from coordinator.broker import EmbeddedBroker
from fedsentry.cli import main


def test_a_broker_on_a_state_folder_writes_its_url_there(tmp_path):
    broker = EmbeddedBroker(devices=["dev-1"], state_dir=tmp_path / "server").start()
    try:
        assert broker.url_file == tmp_path / "server" / "broker.url"
        assert broker.url_file.read_text() == f"{broker.url}\n"
        assert stat.S_IMODE(broker.url_file.stat().st_mode) == 0o600
    finally:
        broker.stop()


def agent(tmp_path, *flags):
    return main(["agent", "--id", "dev-1", "--state-dir", str(tmp_path / "state"), *flags])


def test_the_agent_takes_its_broker_from_the_file(tmp_path, capsys):
    f = tmp_path / "broker.url"
    f.write_text("ftp://127.0.0.1:1\n")  # a URL the agent refuses: proof it was read, without a broker
    assert agent(tmp_path, "--broker-file", str(f)) == 2
    assert "ftp://127.0.0.1:1" in capsys.readouterr().err


def test_a_missing_or_empty_file_or_both_flags_are_refused_naming_the_flag(tmp_path, capsys):
    assert agent(tmp_path, "--broker-file", str(tmp_path / "nope")) == 2
    err = capsys.readouterr().err
    assert "--broker-file" in err and "nope" in err and "fedsentry serve" in err, err
    (tmp_path / "empty").write_text("")
    assert agent(tmp_path, "--broker-file", str(tmp_path / "empty")) == 2
    assert "--broker-file" in capsys.readouterr().err
    assert agent(tmp_path, "--broker", "mqtt://127.0.0.1:1", "--broker-file", str(tmp_path / "empty")) == 2
    err = capsys.readouterr().err
    assert "--broker-file" in err and "not allowed with" in err, err
