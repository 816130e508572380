"""A watcher that removes a process's runs when the process dies, however it dies.

A run removes what it made on exit and on Ctrl-C, and the next run removes what a crashed
one left. But a test session SIGKILLed, or a pytest worker that crashed, with no next run
on the machine, left namespaces, daemons and their state behind until someone came. So the
first run a process claims starts one reaper for that process: a small process in its own
session (a signal to the owner's process group does not reach it) that holds the read end
of a pipe whose write end only the owner holds. The kernel closes that end when the owner
exits, by any means; the reaper then waits for the owner to be gone and removes the runs it
owned (`cnikit cleanup --run ID...`: their namespaces, processes, state and containers);
other runs' leftovers are left to the next run's cleanup, as before. An owner that exits
cleanly has removed its runs already: its reaper finds nothing and exits.

`python -m cnikit.reaper OWNER_PID OWNER_START` is the reaper; `ensure()` starts it.

A process that belongs to no run (the LocalStack a test session shares) is instead tied to
its parent (`tied(argv)`): the kernel SIGKILLs it when the thread that started it exits
(PR_SET_PDEATHSIG, kept across exec), so start such a process from a thread that lives as
long as it should (a pytest fixture runs in the main thread). Its temp dir (`cnikit-*`,
marked with its owner by runtime.write_owner) goes with the owner's reaper.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cnikit import runtime

PR_SET_PDEATHSIG = 1
# Temp dirs named so and marked with their owner (runtime.write_owner) go with the owner
# (LocalStack's files).
TEMP_PREFIX = "cnikit-"
CONTAINERS_MARK = "containers"  # in a run's directory: it started containers (their engine)
_started: dict[int, int] = {}  # owner pid -> the write end it holds (one reaper per process)


def ensure() -> None:
    """Start this process's reaper unless it has one (a forked child gets its own)."""
    pid = os.getpid()
    if pid in _started:
        return
    read, write = os.pipe()  # both ends non-inheritable: no child of ours holds the write end
    try:
        subprocess.Popen([sys.executable, "-m", "cnikit.reaper", str(pid),
                          runtime.process_start_time(pid) or "0"],
                         stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    except OSError:
        os.close(write)  # no reaper: the next run's cleanup still removes what we leave
        return
    finally:
        os.close(read)
    _started[pid] = write


def tied(argv: list[str]) -> list[str]:
    """argv, run so that it dies with this process (see above)."""
    return [sys.executable, "-m", "cnikit.reaper", "--tie", str(os.getpid()), "--",
            *argv]


def _tie(parent: int, argv: list[str]) -> int:
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl: nothing to outlive
        return 1
    os.execvp(argv[0], argv)
    return 1


def mark_containers(run_id: str | None, engine: str) -> None:
    """Say that a run started containers, so its reaper asks the engine to remove them."""
    if run_id:
        with contextlib.suppress(OSError):
            (runtime.RUN_ROOT / run_id / CONTAINERS_MARK).write_text(engine)


def containers_of(run_dir: Path) -> str | None:
    """The engine a run started containers with, or None."""
    try:
        return (run_dir / CONTAINERS_MARK).read_text().strip() or None
    except OSError:
        return None


def _owner_gone(pid: int, start: str, deadline_s: float = 30.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not runtime.still_running(pid, start):
            return True
        time.sleep(0.05)
    return False


def _owned_by(d: Path, pid: int, start: str) -> bool:
    """d carries the owner mark (runtime.write_owner) of that process."""
    return runtime.owner_of(d) == (pid, start)


def reap(pid: int, start: str) -> None:
    if not _owner_gone(pid, start):
        return  # the pipe closed early (an exec?): the next run's cleanup will do
    for d in Path(tempfile.gettempdir()).glob(TEMP_PREFIX + "*"):
        if _owned_by(d, pid, start):
            shutil.rmtree(d, ignore_errors=True)
    with contextlib.suppress(OSError):
        runs = sorted(d.name for d in runtime.RUN_ROOT.iterdir() if _owned_by(d, pid, start))
        if runs:  # else the owner removed its runs itself
            # Only the owner's: other runs' leftovers are the next run's or `cnikit
            # cleanup`'s, and a test may be looking at them right now.
            args = [a for rid in runs for a in ("--run", rid)]
            os.execv(sys.executable, [sys.executable, "-m", "cnikit.cli", "cleanup", "-q",
                                      *args])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--tie"] and argv[2:3] == ["--"]:
        return _tie(int(argv[1]), argv[3:])
    pid, start = int(argv[0]), argv[1]
    with contextlib.suppress(OSError):
        while os.read(0, 4096):  # only EOF ends this: the owner never writes
            pass
    reap(pid, start)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
