"""Errors that reach the user as one line and exit status 2."""


class UsageError(Exception):
    """Bad input from the user (flags, files, values): reported as one line, exit status 2."""
