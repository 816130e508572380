"""The daemon lifecycle every runtime shares (cnikit.daemon.handle.DaemonHandle), on the
process runtime with small stand-in daemons (no root): readiness within a deadline, a
daemon that exits first, a bounded stop of one that ignores SIGTERM, and a kill that
reaches what the daemon forked."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from cnikit.daemon.process import ChildProcess
from cnikit.errors import DaemonNotReady
from tests.waiting import wait_for


class Stand(ChildProcess):
    """A Python one-liner as the daemon, ready when it has written `ready` in its state dir
    (it has no socket: readiness is the marker alone)."""

    def __init__(self, state_dir, code: str):
        self.state_dir = state_dir
        self.env = {}
        self.code = code

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.code]

    def ready_now(self) -> bool:
        return (self.state_dir / "ready").exists()


READY = ("import os, time; open(os.path.join(os.environ['CNIKIT_STATE_DIR'], 'ready'), 'w')"
         ".close(); time.sleep(60)")


def test_start_waits_until_ready_and_reports_each_pid(tmp_path):
    d = Stand(tmp_path, READY)
    pids = []
    d.on_start = pids.append
    try:
        d.start(wait=30)
        assert d.alive() and pids == [d.pid] and d.starts == 1
        first = d.pid
        d.restart(wait=30)
        assert d.alive() and pids == [first, d.pid] and d.pid != first and d.starts == 2
    finally:
        d.stop()
    assert not d.alive()


def test_a_daemon_that_exits_first_is_not_ready_and_says_so(tmp_path):
    d = Stand(tmp_path, "import sys; print('no config'); sys.exit(3)")
    with pytest.raises(DaemonNotReady) as e:
        d.start(wait=30)
    assert e.value.exited and str(e.value) == "daemon exited: no config"


def test_a_daemon_never_ready_fails_at_its_deadline(tmp_path):
    d = Stand(tmp_path, "import time; time.sleep(60)")
    try:
        t0 = time.monotonic()
        with pytest.raises(DaemonNotReady) as e:
            d.start(wait=0.5)
        assert 0.5 <= time.monotonic() - t0 < 10
        assert not e.value.exited and str(e.value).startswith("daemon not ready after 0s")
    finally:
        d.stop()


def test_kill_is_bounded_and_reaches_what_the_daemon_forked(tmp_path):
    # Ignores SIGTERM, and leaves a child in its process group.
    code = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "open(os.path.join(os.environ['CNIKIT_STATE_DIR'], 'ready'), 'w').write(str(c.pid)); "
            "time.sleep(60)")
    d = Stand(tmp_path, code)
    d.start(wait=30)
    wait_for(lambda: (tmp_path / "ready").read_text(), 10, "the child's pid")
    child = int((tmp_path / "ready").read_text())
    t0 = time.monotonic()
    assert d.kill(signal.SIGTERM, wait=0.5) == -signal.SIGKILL
    assert time.monotonic() - t0 < 10 and not d.alive()

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"

    wait_for(gone, 10, "the daemon's child killed with it")
