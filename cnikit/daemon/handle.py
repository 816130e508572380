"""One node's daemon, whatever runs it: the lifecycle every runtime shares.

DaemonHandle starts the daemon, waits until it is ready (within a deadline), signals it and
stops it (within a bound); a runtime says only how it spawns, signals and watches its
daemon:

    ChildProcess   a child process of the kit (cnikit.daemon.process): the reference
                   daemon (DaemonProcess) or a target's command (cnikit.targets.node)
    ContainerDaemon  a container joined to the node's namespace
                     (cnikit.containers.container_daemon)

What callers use (cnikit.cluster, cnikit.testkit, the nemesis, tests): start(wait),
wait_ready(timeout), alive(), pid, kill(sig), stop(), restart(wait), on_start (called with
each new pid: the cluster records it for cleanup), starts, state_dir, socket_path, tail(),
checkpoint(). A daemon that exits before it is ready, or is not ready in time, raises
cnikit.errors.DaemonNotReady. The state directory outlives restarts, like a DaemonSet's
host-path volume.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from cnikit.errors import DaemonNotReady
from cnikit.unixcall import exchange

SOCKET_NAME = "ipamd.sock"
POLL = 0.02  # seconds between checks of a condition (ready, exited)
TERMINATING = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)  # kill() waits for the exit


def ping(socket_path: str | os.PathLike, timeout: float = 1.0) -> bool:
    try:
        return json.loads(exchange(str(socket_path), b'{"cmd":"ping"}\n', timeout)).get("ok") is True
    except (OSError, ValueError):
        return False


class StateDir:
    """Where a node's daemon keeps its socket and log, whatever runs it (process or container)."""

    state_dir: Path

    @property
    def socket_path(self) -> Path:
        return self.state_dir / SOCKET_NAME

    @property
    def log_path(self) -> Path:
        return self.state_dir / "daemon.log"

    def checkpoint(self) -> dict:
        try:
            return json.loads((self.state_dir / "ipam.json").read_text())
        except (OSError, ValueError):
            return {"version": None, "allocations": []}


class DaemonHandle(StateDir):
    """The lifecycle; a runtime's subclass supplies _spawn, alive, pid, _signal,
    _wait_exit, _exit_status and tail. Readiness is the reference daemon's (its `ready`
    marker written and its socket answering a ping) unless a subclass says otherwise
    (cnikit.targets.node.TargetReadiness)."""

    starts = 0  # how many times it was started
    on_start = None  # called with the pid of each start (e.g. to record it for cleanup)
    ready_timeout = 30.0  # start()'s and wait_ready()'s default
    what = "daemon"  # how its errors name it

    # ---- the runtime's part --------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def tail(self, lines: int = 3) -> str:
        """The last lines of its log, as one line."""
        raise NotImplementedError

    def _spawn(self) -> int | None:
        """Run the daemon (not waiting for it); its pid here, when known."""
        raise NotImplementedError

    def _signal(self, sig: int) -> None:
        raise NotImplementedError

    def _wait_exit(self, timeout: float) -> bool:
        """Wait up to timeout for the daemon to exit; whether it did."""
        raise NotImplementedError

    def _exit_status(self) -> int | None:
        raise NotImplementedError

    def _stopped(self) -> None:
        """After stop(): what the runtime removes (a container)."""

    # ---- readiness (the reference daemon's) ---------------------------------------------

    def ready_now(self) -> bool:
        return (self.state_dir / "ready").exists() and ping(self.socket_path)

    def _forget_ready(self) -> None:
        # A SIGKILLed daemon leaves its ready marker behind.
        (self.state_dir / "ready").unlink(missing_ok=True)

    def _exited_message(self) -> str:
        return f"{self.what} exited: {self.tail()}"

    def _not_ready_message(self, timeout: float) -> str:
        return f"{self.what} not ready after {timeout:.0f}s: {self.tail()}"

    # ---- the lifecycle ---------------------------------------------------------------------

    def start(self, wait: float | None = None) -> DaemonHandle:
        """Start it unless it runs; then wait up to `wait` seconds (default ready_timeout;
        0: do not wait) until it is ready."""
        if self.alive():
            return self
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._forget_ready()
        pid = self._spawn()
        self.starts += 1
        if pid and self.on_start is not None:
            self.on_start(pid)
        if wait is None:
            wait = self.ready_timeout
        if wait:
            self.wait_ready(wait)
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Until it is ready; DaemonNotReady when it exits first (exited=True) or the time
        is up."""
        if timeout is None:
            timeout = self.ready_timeout
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise DaemonNotReady(self._exited_message(), exited=True)
            if self.ready_now():
                return
            if time.monotonic() >= deadline:
                raise DaemonNotReady(self._not_ready_message(timeout), exited=False)
            time.sleep(POLL)

    def kill(self, sig: int = signal.SIGKILL, wait: float = 10.0) -> int | None:
        """Send sig; for SIGKILL/SIGTERM/SIGINT wait up to `wait` for the exit (then
        SIGKILL, and as long again) and return its status. The state dir stays as it is."""
        if not self.alive():
            return None
        self._signal(sig)
        if sig not in TERMINATING:
            return None
        if not self._wait_exit(wait):
            self._signal(signal.SIGKILL)
            self._wait_exit(wait)
        return self._exit_status()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        self._stopped()
        self._forget_ready()

    def restart(self, wait: float | None = None) -> DaemonHandle:
        self.stop()
        return self.start(wait)
