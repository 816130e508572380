"""Stop a daemon the moment it opens a file of its state for writing (fanotify).

A crash in the middle of a checkpoint write is what atomic writes (temp file, fsync,
rename) are for, and a SIGKILL at a random moment almost never lands inside a write that
takes microseconds. fanotify's permission events make the moment exact: the daemon's open()
waits for the trap's answer, so the trap sends SIGSTOP first and then allows the open. The
open completes (O_TRUNC included) and the daemon stops on its way back from the syscall,
before it wrote a byte. If it opened the file for writing (not appending), the trap hands
it to `on_fire` (the nemesis kills the daemon there); otherwise it lets it go on.

Only the daemon's own processes (its pid and their children) are stopped; every other
opener is allowed at once. Closing the trap allows whatever is still pending. Needs root
(CAP_SYS_ADMIN) and a kernel with fanotify permission events.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cnikit.errors import EnvironmentProblem

FAN_CLOEXEC, FAN_NONBLOCK, FAN_CLASS_CONTENT = 0x1, 0x2, 0x4
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
    """Armed on `directory` until it fires once or is closed.

    pids: the daemon's current pid(s) (a callable: a restarted daemon has a new one).
    on_fire(pid, path): called in the trap's thread with the writer stopped; it must end it
    (SIGKILL) or the writer stays stopped.
    """

    def __init__(self, directory: str | os.PathLike, pids: Callable[[], set[int]],
                 on_fire: Callable[[int, str], None]):
        self.directory = Path(directory)
        self.pids = pids
        self.on_fire = on_fire
        self.fired: dict | None = None  # {"pid", "path", "at"} once it fired
        self.error: str | None = None
        self._done = threading.Event()
        libc = _libc()
        fd = libc.fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK,
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
                    length, _, _, _, mask, efd, pid = EVENT.unpack_from(buf, off)
                    off += length
                    if efd >= 0:
                        self._event(efd, pid, mask)
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

    def _event(self, efd: int, pid: int, mask: int) -> None:
        answered = False
        try:
            if self.fired is None and mask & FAN_OPEN_PERM and self._ours(pid):
                path = os.readlink(f"/proc/self/fd/{efd}")
                os.kill(pid, signal.SIGSTOP)
                self._allow(efd)
                answered = True
                if _opened_for_writing(pid, path):
                    self.fired = {"pid": pid, "path": path, "at": time.time()}
                else:
                    os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        finally:
            if not answered:
                self._allow(efd)
            os.close(efd)

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


def _ppid(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _opened_for_writing(pid: int, path: str, within: float = 1.0) -> bool:
    """Whether the stopped process now holds `path` open for writing (not appending)."""
    end = time.monotonic() + within
    while time.monotonic() < end and not _all_stopped(pid):
        time.sleep(0.001)  # every thread stopped: the opener is back from open(), its fd set
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != path:
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        flags = next((int(line.split()[1], 8) for line in info.splitlines()
                      if line.startswith("flags:")), 0)
        if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR) and not flags & os.O_APPEND:
            return True
    return False


def _all_stopped(pid: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("T", "t"):
            return False
    return True
