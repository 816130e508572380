"""Errors a user can act on: one line and an exit code, never a traceback."""

from __future__ import annotations


class OneLineError(Exception):
    """A failure explained in one line. `exit_code` 2 means bad usage or environment."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class SpecError(OneLineError, ValueError):
    """A bad fault spec: the message is one line, shown to the user as is."""
