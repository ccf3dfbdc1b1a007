"""The `fedsentry` command. Sub-commands live in their own modules and register themselves here."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from fedsentry.errors import Terminated, UsageError

#: modules that provide register(subparsers_by_verb); imported lazily so the agent stays light
COMMAND_MODULES = ("fedsentry.cli.pca", "fedsentry.cli.recsys", "fedsentry.cli.dictionary", "fedsentry.cli.otmap",
                   "fedsentry.cli.agent", "fedsentry.cli.server", "fedsentry.cli.api", "fedsentry.cli.bench",
                   "fedsentry.cli.sample", "fedsentry.cli.suppress", "fedsentry.cli.feedback", "fedsentry.cli.db")
#: verbs whose parser one module builds: `fedsentry agent` imports that module alone, not the server's, the
#: benchmarks' and the simulators' (about 5 MiB less resident on a device); `fedsentry sample` needs numpy only
VERB_MODULES = {"agent": ("fedsentry.cli.agent",), "sample": ("fedsentry.cli.sample",)}
#: environment a command's own process sets before numpy loads, unless the user set it: the agent does its arithmetic
#: on one thread (OpenBLAS's second thread and its buffer cost a device 1.3 MiB resident while it scores, and the
#: chunked matrix products of a round gain nothing from it: five E-steps over 40,000 records took 1.4-2.7 s on one
#: thread and 2.2-17.7 s on two on a busy 2-core machine; README, bench agent-memory)
PROCESS_ENV = {"agent": {"OPENBLAS_NUM_THREADS": "1"}}


class _Version(argparse.Action):
    """--version, reading the installed package's metadata only when asked (importlib.metadata is heavy)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import version

        print(f"fedsentry {version('fedsentry')}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, status 2, no usage dump
        raise UsageError(message if self.prog == "fedsentry" else f"{self.prog[len('fedsentry '):]}: {message}")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command's parser (every command's); given the arguments, only the modules their verb needs."""
    import importlib

    parser = _Parser(prog="fedsentry", description="Federated anomaly detection for IoT networks.")
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    groups = {
        "simulate": verbs.add_parser("simulate", help="run a federated job in one process").add_subparsers(
            dest="job", required=True, parser_class=_Parser),
        "bench": verbs.add_parser("bench", help="benchmark every algorithm on one split").add_subparsers(
            dest="job", required=True, parser_class=_Parser),
    }
    verb = _verb(argv)
    for name in VERB_MODULES.get(verb or "", COMMAND_MODULES):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:  # a command whose optional dependencies are not installed
            if e.name and e.name.startswith("fedsentry"):
                continue
            raise
        module.register(groups, verbs)
    for parser_ in _leaves(parser):  # -v after the command too (fedsentry agent ... -v), as before it
        if parser_ is not parser:
            parser_.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                                 help="debug logging on stderr")
    return parser


def _verb(argv: Sequence[str] | None) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None) if argv is not None else None


def _leaves(parser: argparse.ArgumentParser):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for a in subs:
        for sub in a.choices.values():
            yield from _leaves(sub)


def dump_stacks_on_sigusr1() -> None:
    """`kill -USR1 PID` prints every thread's stack on stderr (where a process seems stuck, what it waits on)."""
    import faulthandler
    import signal

    if hasattr(signal, "SIGUSR1") and not faulthandler.is_enabled():
        with contextlib.suppress(ValueError, RuntimeError, io.UnsupportedOperation, AttributeError):
            faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        if argv is None:  # this process is the command (not a caller passing its own arguments)
            dump_stacks_on_sigusr1()
            for name, value in PROCESS_ENV.get(_verb(sys.argv[1:]) or "", {}).items():
                os.environ.setdefault(name, value)
        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(argv).parse_args(argv)
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
        logging.getLogger("alembic").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
        return int(args.func(args) or 0)
    except UsageError as e:
        print(f"fedsentry: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print("fedsentry: terminated (SIGTERM)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("fedsentry: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
