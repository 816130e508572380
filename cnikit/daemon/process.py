"""Running `cnikit daemon` as a child process, optionally inside a network namespace.

What a fabric node uses for `restart_daemon()` / `kill_daemon(signal)`: the process keeps
its state directory (socket, ipam.json, log) across restarts, like a DaemonSet pod's
host-path volume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cnikit.errors import DaemonNotReady
from cnikit.unixcall import exchange

SOCKET_NAME = "ipamd.sock"


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


class ChildProcess(StateDir):
    """A node's daemon run as a child process of the kit: its own daemon or a target's
    command line."""

    proc: subprocess.Popen | None = None
    starts = 0  # how many times it was started
    on_start = None  # called with the pid (e.g. to record it for cleanup)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class DaemonProcess(ChildProcess):
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

    def start(self, wait: float = 30.0) -> DaemonProcess:
        if self.alive():
            return self
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # A SIGKILLed daemon leaves its ready marker behind.
        (self.state_dir / "ready").unlink(missing_ok=True)
        env = {**os.environ, **self.env, "CNIKIT_STATE_DIR": str(self.state_dir)}
        env.setdefault("PYTHONUNBUFFERED", "1")
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.command(), env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        finally:
            log.close()
        self.starts += 1
        if self.on_start is not None:
            self.on_start(self.proc.pid)
        if wait:
            self.wait_ready(wait)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise DaemonNotReady(f"daemon exited with {self.proc.returncode}: {self.tail()}")
            if (self.state_dir / "ready").exists() and ping(self.socket_path):
                return
            time.sleep(0.02)
        raise DaemonNotReady(f"daemon not ready after {timeout:.0f}s: {self.tail()}")

    def tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:])

    def kill(self, sig: int = signal.SIGKILL, wait: float = 10.0) -> int | None:
        """Send sig; for SIGKILL/SIGTERM wait for the exit. Leaves the state dir as it is."""
        if not self.alive():
            return None
        self.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            try:
                return self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(wait)
        return None

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        (self.state_dir / "ready").unlink(missing_ok=True)

    def restart(self, wait: float = 30.0) -> DaemonProcess:
        self.stop()
        (self.state_dir / "ready").unlink(missing_ok=True)
        return self.start(wait)

    def checkpoint(self) -> dict:
        try:
            return json.loads((self.state_dir / "ipam.json").read_text())
        except (OSError, ValueError):
            return {"version": None, "allocations": []}
