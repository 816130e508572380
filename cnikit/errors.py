"""Errors a user can act on: one line, an exit code, never a traceback."""

from faultcore.errors import OneLineError


class CnikitError(OneLineError):
    """A failure explained in one line. `exit_code` 2 means bad usage or environment.
    (faultcore's OneLineError, which `fault-imds` raises, shares the shape and the runner.)"""


class UsageError(CnikitError):
    """Bad arguments, bad fault spec, unknown scenario."""


class EnvironmentProblem(CnikitError):
    """Not root, a missing tool, a port or run id already taken."""


class DaemonNotReady(EnvironmentProblem):
    """A daemon under test never became ready (or exited before it was: `exited`): when the
    kit and the machine work, the build's failure, which a scenario reports as a liveness
    violation."""

    def __init__(self, message: str, exited: bool = False):
        super().__init__(message)
        self.exited = exited
