"""Errors that reach the user as one line: bad input (exit status 2), and being told to stop (143)."""


class UsageError(Exception):
    """Bad input from the user (flags, files, values): reported as one line, exit status 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`) where a command cleans up as on Ctrl-C: raised in the main thread, so the same
    `with` blocks and `finally` clauses run; exit status 143 (128 + SIGTERM), as a shell reports it."""


def database_error(flag: str, e: Exception) -> UsageError:
    """A database URL nobody can use (unparsable, nobody answers, refused), as the flag's error: the driver's own
    first line, not a traceback."""
    from sqlalchemy.exc import OperationalError

    text = str(e.orig if isinstance(e, OperationalError) and e.orig is not None else e).strip()
    return UsageError(f"{flag}: {text.splitlines()[0] if text else type(e).__name__}")
