"""Signals as the kernel may route them: to a thread of the process other than its main one."""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)


def signal_a_side_thread(pid: int, sig: int) -> int:
    """Send `sig` to one of `pid`'s threads other than the main one (tgkill) and return the
    thread's id. A signal sent to a process lands on whichever of its threads the kernel
    picks; a foreground command must stop whichever one it is."""
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    if not tids:
        raise AssertionError(f"process {pid} has no thread besides its main one")
    if _libc.tgkill(pid, tids[-1], sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill {pid} {tids[-1]}")
    return tids[-1]
