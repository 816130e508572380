"""Kill a daemon the moment it opens a file of its state directory (fanotify).

A crash in the middle of a checkpoint write is what atomic writes (temp file, fsync,
rename) are for, and a SIGKILL at a random moment almost never lands inside a write that
takes microseconds. fanotify's permission events make the moment exact: the daemon's open()
waits for the trap's answer. The trap allows it and sends SIGKILL at once: the open
completes in the kernel (O_TRUNC included) and the daemon dies on its way back from the
syscall, before it can write a byte. (Stopping it there with SIGSTOP instead was tried:
this kernel interrupts the waiting open and restarts it.) An in-place writer leaves an
empty checkpoint; an atomic one an unused temp file beside the intact checkpoint.

Only the daemon's own processes (its pid and their children) trigger it; every other opener
is allowed at once. The kill reaches the daemon's process group (a daemon runs in one of its
own: cnikit.daemon.process), so what it forked dies with it, as with the nemesis's other
kills; an opener outside that group is killed alone. Closing the trap allows whatever is still pending. Needs root
(CAP_SYS_ADMIN) and a kernel with fanotify permission events.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import select
import signal
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cnikit.errors import EnvironmentProblem

FAN_CLOEXEC, FAN_NONBLOCK, FAN_CLASS_CONTENT, FAN_REPORT_TID = 0x1, 0x2, 0x4, 0x100
FAN_OPEN_PERM, FAN_EVENT_ON_CHILD, FAN_MARK_ADD, FAN_ALLOW = 0x10000, 0x08000000, 0x1, 0x1
AT_FDCWD = -100
# struct fanotify_event_metadata: event_len, vers, reserved, metadata_len, mask, fd, pid
EVENT = struct.Struct("=IBBHQii")
RESPONSE = struct.Struct("=iI")  # struct fanotify_response: fd, response


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                   ctypes.c_char_p]
    return libc


class WriteTrap:
    """Armed on `directory` until it fires once (the daemon killed) or is closed.

    pids: the daemon's current pid(s) (a callable: a restarted daemon has a new one).
    on_fire(pid, path): called in the trap's thread once the daemon was killed (the nemesis
    records the kill there), the trap already closed. before_kill(): called right before
    the kill, in the trap's thread (it must not open files in the directory).
    """

    def __init__(self, directory: str | os.PathLike, pids: Callable[[], set[int]],
                 on_fire: Callable[[int, str], None],
                 before_kill: Callable[[], None] | None = None):
        self.directory = Path(directory)
        self.pids = pids
        self.on_fire = on_fire
        self.before_kill = before_kill
        self.fired: dict | None = None  # {"pid", "path", "at"} once it fired
        self.error: str | None = None
        self._done = threading.Event()
        libc = _libc()
        fd = libc.fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_TID,
                                os.O_RDONLY | os.O_LARGEFILE)
        if fd < 0:
            raise EnvironmentProblem(
                f"fanotify is not available here ({os.strerror(ctypes.get_errno())}): the "
                "kill-in-write nemesis needs root and fanotify permission events")
        if libc.fanotify_mark(fd, FAN_MARK_ADD, FAN_OPEN_PERM | FAN_EVENT_ON_CHILD, AT_FDCWD,
                              os.fsencode(self.directory)) != 0:
            err = os.strerror(ctypes.get_errno())
            os.close(fd)
            raise EnvironmentProblem(f"fanotify cannot watch {self.directory}: {err}")
        self._fd = fd
        self._thread = threading.Thread(target=self._loop, name="write-trap", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> dict | None:
        """What it fired on (on_fire done), or None when it did not within timeout."""
        return self.fired if self._done.wait(timeout) else None

    def close(self) -> None:
        self._done.set()
        self._thread.join(5)

    def __enter__(self) -> WriteTrap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the trap's thread ---------------------------------------------------------------

    def _loop(self) -> None:
        # The allow wakes the daemon, and on a busy machine the woken thread could take this
        # one's CPU before the SIGKILL is sent and write its checkpoint after all (1 run in
        # 80 on 2 cores with four busy loops; none in 160 since this thread runs SCHED_FIFO).
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        try:
            while not self._done.is_set() and self.fired is None:
                ready, _, _ = select.select([self._fd], [], [], 0.05)
                if not ready:
                    continue
                try:
                    buf = os.read(self._fd, 8192)
                except BlockingIOError:
                    continue
                off = 0
                while off + EVENT.size <= len(buf):
                    length, _, _, _, mask, efd, tid = EVENT.unpack_from(buf, off)
                    off += length
                    if efd >= 0:
                        self._event(efd, tid, mask)
        except Exception as e:  # noqa: BLE001 - reported by wait()'s caller, never raised here
            self.error = f"{type(e).__name__}: {e}"
        finally:
            # Allows anything still pending, and on_fire may open files in the directory
            # itself without waiting on its own answer.
            os.close(self._fd)
            try:
                if self.fired is not None:
                    self.on_fire(self.fired["pid"], self.fired["path"])
            except Exception as e:  # noqa: BLE001
                self.error = f"{type(e).__name__}: {e}"
            finally:
                self._done.set()

    def _event(self, efd: int, tid: int, mask: int) -> None:
        pid = write = 0
        path = ""
        try:
            try:
                if self.fired is None and mask & FAN_OPEN_PERM:
                    pid = _tgid(tid)
                    # The opener waits in open(): its flags are in its syscall's arguments.
                    write = self._ours(pid) and _opening_for_writing(pid, tid)
                    path = os.readlink(f"/proc/self/fd/{efd}") if write else ""
            finally:
                self._allow(efd)  # ours too: its open must complete, O_TRUNC and all
            if write:
                if self.before_kill is not None:
                    self.before_kill()  # e.g. the kit's watch told first: no crash of its own
                self._kill(pid)  # it dies on its way back from open()
                self.fired = {"pid": pid, "path": path, "at": time.time()}
        except ProcessLookupError:
            pass
        finally:
            os.close(efd)

    def _kill(self, pid: int) -> None:
        """SIGKILL the opener's process group when a daemon leads it, else the opener (never
        a group the daemon does not lead: the kit's own, say)."""
        try:
            group = os.getpgid(pid)
        except ProcessLookupError:
            group = 0
        if group and group in self.pids():
            os.killpg(group, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)

    def _allow(self, efd: int) -> None:
        os.write(self._fd, RESPONSE.pack(efd, FAN_ALLOW))

    def _ours(self, pid: int) -> bool:
        roots = {p for p in self.pids() if p}
        for _ in range(32):  # up the parent chain: the daemon or one of its children
            if pid in roots:
                return True
            pid = _ppid(pid)
            if pid <= 1:
                return False
        return False


def _tgid(tid: int) -> int:
    return _status(tid, "Tgid")


# Syscall numbers whose flags argument we can read: open(path, flags), openat(dir, path,
# flags); creat always writes. openat2's flags sit in a struct: not judged.
OPEN_FLAGS_ARG, CREAT = {"x86_64": ({2: 1, 257: 2}, 85),
                         "aarch64": ({56: 2}, -1)}.get(platform.machine(), ({}, -1))


def _opening_for_writing(pid: int, tid: int) -> bool:
    """Whether the thread, blocked in open(), opens for writing (not appending)."""
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
        nr = int(fields[0])
        if nr == CREAT:
            return True
        flags = int(fields[1 + OPEN_FLAGS_ARG[nr]], 16)
    except (OSError, ValueError, IndexError, KeyError):
        return False
    return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR) and not flags & os.O_APPEND


def _ppid(pid: int) -> int:
    return _status(pid, "PPid")


def _status(pid: int, field: str) -> int:
    """A number from /proc/PID/status (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


