"""`fedsentry coordinator`'s role flags refuse what cannot work, naming the flag (issue 27)."""

from __future__ import annotations

import pytest

from fedsentry.cli import main


@pytest.mark.parametrize("args, env, said", [
    (["--queue", "http://user:secret@host/"], {}, "--queue: http://host... is not an AMQP URL"),
    (["--queue", "amqp://"], {}, "--queue: amqp://... is not an AMQP URL"),
    (["--role", "driver", "--queue", "http://user:secret@host/"], {}, "--queue: http://host... is not an AMQP URL"),
    ([], {"FEDSENTRY_ROLE": "boss"}, "$FEDSENTRY_ROLE: 'boss' is not one of all, driver, ingest"),
])
def test_bad_role_settings_are_refused_by_name(args, env, said, tmp_path, capsys, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = main(["coordinator", "--broker", "mqtt://127.0.0.1:1", "--db", f"sqlite:///{tmp_path}/c.db", *args])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "secret" not in err


def test_bad_role_flags_are_refused_by_argparse(tmp_path, capsys):
    for flag in (["--role", "boss"], ["--ingest-workers", "0"]):
        assert main(["coordinator", "--broker", "mqtt://127.0.0.1:1", "--db", f"sqlite:///{tmp_path}/c.db", *flag]) == 2
        assert flag[0] in capsys.readouterr().err
