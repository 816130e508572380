"""Running a node's daemon as a child process, optionally inside a network namespace: the
process runtime of cnikit.daemon.handle.

What a fabric node uses for `restart_daemon()` / `kill_daemon(signal)`: the process keeps
its state directory (socket, ipam.json, log) across restarts, like a DaemonSet pod's
host-path volume. It runs in a process group of its own, so a kill reaches whatever it
forked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from cnikit.daemon.handle import DaemonHandle
from cnikit.errors import EnvironmentProblem


class ChildProcess(DaemonHandle):
    """A node's daemon run as a child process of the kit: its own daemon or a target's
    command line (command())."""

    proc: subprocess.Popen | None = None
    env: dict[str, str]

    def command(self) -> list[str]:
        raise NotImplementedError

    def program(self) -> str:
        """What a failure to start names."""
        return self.command()[0]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _spawn(self) -> int:
        env = {**os.environ, **self.env, "CNIKIT_STATE_DIR": str(self.state_dir)}
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as log:
            try:
                # nsenter execs the command: the pid is the daemon's, and so is the group.
                self.proc = subprocess.Popen(self.command(), env=env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
            except OSError as e:
                raise EnvironmentProblem(f"cannot start {self.program()}: {e.strerror}") from None
        return self.proc.pid

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def _wait_exit(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        self._signal(signal.SIGKILL)  # children that outlived it, in its group
        return True

    def _exit_status(self) -> int | None:
        return self.proc.returncode

    def tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:])


class DaemonProcess(ChildProcess):
    """`cnikit daemon` (the reference daemon), ready by its marker and a ping."""

    def __init__(self, state_dir: str | os.PathLike, env: dict[str, str] | None = None,
                 netns: str | None = None, python: str = sys.executable):
        self.state_dir = Path(state_dir)
        self.env = dict(env or {})
        self.netns = netns  # a name under /run/netns or a path
        self.python = python

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "cnikit.cli", "daemon", "--state-dir", str(self.state_dir)]
        if self.netns:
            path = self.netns if "/" in self.netns else f"/run/netns/{self.netns}"
            cmd = ["nsenter", f"--net={path}", "--"] + cmd
        return cmd

    def _exited_message(self) -> str:
        return f"daemon exited with {self.proc.returncode}: {self.tail()}"
