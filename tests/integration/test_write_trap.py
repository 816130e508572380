"""The nemesis's write trap (fanotify): a daemon killed as it opens a file of its state."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap

import pytest

from cnikit import runtime
from cnikit.cluster.write_trap import WriteTrap
from tests.waiting import wait_for

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs root")]

OLD = '{"version":"vpc-cni-ipam/1","allocations":[{"ipv4":"10.0.1.5"}]}'


def writer(directory, atomic: bool) -> subprocess.Popen:
    """A process that reads its checkpoint, then rewrites it (in place or atomically) from
    a second thread, like the daemon's ADD handler."""
    path = os.path.join(directory, "ipam.json")
    body = f"""
        import os, threading, time
        def write():
            time.sleep(0.2)
            open({path!r}).read()  # a read: the trap lets it go on
            target = {path!r} + (".tmp" if {atomic!r} else "")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, b"NEW")
            os.close(fd)
            if {atomic!r}:
                os.rename(target, {path!r})
        t = threading.Thread(target=write)
        t.start()
        t.join()
    """
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)])


@pytest.mark.parametrize("atomic", [False, True], ids=["in-place", "atomic"])
def test_the_writer_dies_after_the_open_before_a_byte(tmp_path, atomic):
    (tmp_path / "ipam.json").write_text(OLD)
    proc = writer(tmp_path, atomic)
    fired = []
    with WriteTrap(tmp_path, lambda: {proc.pid}, lambda pid, path: fired.append(path)) as trap:
        # Another process opening files there meanwhile is never held.
        assert (tmp_path / "ipam.json").read_text() == OLD
        hit = trap.wait(10)
    assert proc.wait(10) == -9, "killed by the trap"
    assert hit is not None and trap.error is None
    if atomic:
        assert hit["path"].endswith("ipam.json.tmp") and fired == [hit["path"]]
        assert (tmp_path / "ipam.json").read_text() == OLD, "the old checkpoint stands"
    else:
        assert hit["path"].endswith("/ipam.json")
        assert (tmp_path / "ipam.json").read_text() == "", "truncated, nothing written"


def test_a_trap_closed_unfired_leaves_the_writer_alone(tmp_path):
    (tmp_path / "ipam.json").write_text(OLD)
    with WriteTrap(tmp_path, lambda: {os.getpid() + 10**7}, lambda *a: None) as trap:
        proc = writer(tmp_path, atomic=False)  # not the trap's daemon
        assert proc.wait(10) == 0
        assert trap.wait(0.1) is None
    assert (tmp_path / "ipam.json").read_text() == "NEW"


def test_the_kill_reaches_what_the_daemon_forked(tmp_path):
    """A daemon whose forked helper writes its state: the trap kills the daemon's process
    group, the daemon and its other children with the helper, as a kill by the nemesis
    does (a daemon runs in a group of its own)."""
    state, side = tmp_path / "state", tmp_path / "side"
    state.mkdir()
    side.mkdir()
    (state / "ipam.json").write_text(OLD)
    writer_code = (f"import os, time; time.sleep(0.2); "
                   f"fd = os.open({str(state / 'ipam.json')!r}, os.O_WRONLY | os.O_TRUNC); "
                   f"os.write(fd, b'NEW')")
    body = f"""
        import subprocess, sys
        idle = subprocess.Popen(["sleep", "600"])
        open({str(side / 'idle')!r}, "w").write(str(idle.pid))
        subprocess.Popen([sys.executable, "-c", {writer_code!r}]).wait()
        idle.wait()
    """
    daemon = subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)],
                              start_new_session=True)
    try:
        with WriteTrap(state, lambda: {daemon.pid}, lambda *a: None) as trap:
            hit = trap.wait(10)
        assert hit is not None and trap.error is None and hit["pid"] != daemon.pid
        assert daemon.wait(10) == -9, "the daemon went with the helper that opened the file"
        idle = int((side / "idle").read_text())
        wait_for(lambda: runtime.process_start_time(idle) is None or runtime.is_zombie(idle),
                 10, "the daemon's other child killed")
        assert (state / "ipam.json").read_text() == "", "truncated, nothing written"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, 9)
