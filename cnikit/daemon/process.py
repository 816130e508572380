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

from cnikit import forkserver
from cnikit.daemon.handle import DaemonHandle
from cnikit.errors import EnvironmentProblem

# `python -m cnikit.cli daemon` is forked from a server that has imported what it imports
# before it serves.
KIT_DAEMON_MODULE = "cnikit.cli"
DAEMON_MODULES = ("cnikit.cli", "cnikit.daemon.main", "cnikit.daemon.config",
                  "cnikit.daemon.server", "cnikit.daemon.ipamd", "cnikit.daemon.ec2_query",
                  "cnikit.daemon.imds_http", "cnikit.daemon.checkpoint", "cnikit.daemon.clock",
                  "cnikit.daemon.profiles", "cnikit.runtime")


class ChildProcess(DaemonHandle):
    """A node's daemon run as a child process of the kit: its own daemon or a target's
    command line (command())."""

    proc: subprocess.Popen | forkserver.Forked | None = None
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
                self.proc = self._launch(env, log)
            except OSError as e:
                raise EnvironmentProblem(f"cannot start {self.program()}: {e.strerror}") from None
        return self.proc.pid

    def inner_command(self) -> list[str]:
        """The program itself, without what enters the namespace."""
        return self.command()

    def netns_path(self) -> str | None:
        return None

    def _launch(self, env: dict[str, str], log) -> subprocess.Popen | forkserver.Forked:
        inner = self.inner_command()
        if inner[:2] == [sys.executable, "-m"] and inner[2:3] == [KIT_DAEMON_MODULE] \
                and forkserver.enabled():
            # The kit's own daemon, forked warm (cnikit.forkserver): the same program for
            # ~0.1 s less CPU per start.
            return forkserver.ForkServer.get(DAEMON_MODULES).spawn(
                inner, KIT_DAEMON_MODULE, env, netns=self.netns_path(), stdout=log.fileno(),
                stderr=log.fileno())
        # nsenter execs the command: the pid is the daemon's, and so is the group.
        return subprocess.Popen(self.command(), env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

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

    def netns_path(self) -> str | None:
        if not self.netns:
            return None
        return self.netns if "/" in self.netns else f"/run/netns/{self.netns}"

    def inner_command(self) -> list[str]:
        return [self.python, "-m", KIT_DAEMON_MODULE, "daemon", "--state-dir",
                str(self.state_dir)]

    def command(self) -> list[str]:
        cmd = self.inner_command()
        if self.netns:
            cmd = ["nsenter", f"--net={self.netns_path()}", "--"] + cmd
        return cmd

    def _exited_message(self) -> str:
        return f"daemon exited with {self.proc.returncode}: {self.tail()}"
