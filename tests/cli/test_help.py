"""Every option of every `fedsentry` command says what it does in `--help`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from fedsentry.cli import build_parser


def commands(parser: argparse.ArgumentParser, path: str = "fedsentry") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{path} {name}")


# add_service_args (fedsentry/cli/server.py) is being changed on the alert-forwarding branch: its --tls and
# --ca-cert get their help there. Delete this entry once that branch is merged.
def test_every_option_has_help_text():
    missing = [f"{path} {'/'.join(a.option_strings) or a.dest}"
               for path, parser in commands(build_parser()) for a in parser._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
               and a.help is not argparse.SUPPRESS and not (a.help or "").strip()]
    assert sorted(set(missing)) == []


def test_the_walk_reaches_nested_commands():
    paths = {path for path, _ in commands(build_parser())}
    assert {"fedsentry job create", "fedsentry simulate pca", "fedsentry demo", "fedsentry apikey list"} <= paths


def test_errors_name_the_command_once(capsys):
    from fedsentry.cli import main

    assert main(["job", "create", "--rank", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "fedsentry: error: job create: argument --rank: expected a whole number, got 'x'", err


def test_apikey_output_reads_as_english_and_the_list_has_a_header(tmp_path, capsys):
    from fedsentry.cli import main

    db = f"sqlite:///{tmp_path}/k.db"
    for role, article in (("admin", "an"), ("viewer", "a")):
        assert main(["apikey", "create", "--role", role, "--db", db]) == 0
        assert f"created {article} {role} key" in capsys.readouterr().err
    assert main(["apikey", "list", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["id", "role", "created (UTC)", "state", "name"] and len(lines) == 3


def test_verbose_works_before_and_after_the_command():
    for argv, expected in ((["job", "list"], False), (["-v", "job", "list"], True), (["job", "list", "-v"], True),
                           (["simulate", "pca", "--verbose"], True)):
        assert build_parser().parse_args(argv).verbose is expected, argv
