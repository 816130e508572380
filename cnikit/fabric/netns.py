"""Network namespaces made in-process: unshare + bind mount, setns through ctypes.

`ip netns add` costs 2.4-3.9 ms and `ip netns exec` grows with the number of namespaces;
unshare(CLONE_NEWNET) in the calling thread plus a bind mount of /proc/thread-self/ns/net
costs about 0.4 ms (measured on 2 cores). setns is per thread, so only the calling thread moves, and
it always moves back before returning.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_dir_lock = threading.Lock()
_dir_ready = False


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def setns(fd: int) -> None:
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def _ensure_dir() -> None:
    """Make /run/netns a shared mount point, as iproute2 does, so `ip netns` agrees with us."""
    global _dir_ready
    with _dir_lock:
        if _dir_ready:
            return
        NETNS_DIR.mkdir(parents=True, exist_ok=True)
        d = str(NETNS_DIR).encode()
        if _libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                _check(_libc.mount(d, d, b"none", MS_BIND | MS_REC, None), "bind /run/netns")
                _check(_libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None), "share /run/netns")
        _dir_ready = True


@contextlib.contextmanager
def entered(target: str | os.PathLike | int) -> Iterator[None]:
    """Run the body with this thread inside the namespace (a name, a path or an fd)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    fd = target if isinstance(target, int) else os.open(_as_path(target), os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
        try:
            yield
        finally:
            setns(home)
    finally:
        os.close(home)
        if not isinstance(target, int):
            os.close(fd)


def _as_path(target: str | os.PathLike) -> str:
    s = os.fspath(target)
    return s if "/" in s else str(netns_path(s))


@contextlib.contextmanager
def created(name: str) -> Iterator[int]:
    """Create namespace `name` (mounted at /run/netns/name) and run the body inside it.

    Yields an fd on the namespace (the caller owns it). Sockets made in the body stay
    in the new namespace. Raises FileExistsError if the name is taken.
    """
    _ensure_dir()
    path = netns_path(name)
    # O_EXCL: a name already taken (a live run, a collision) fails instead of being reused.
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    fd = -1
    try:
        _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        try:
            _check(_libc.mount(b"/proc/thread-self/ns/net", str(path).encode(), b"none", MS_BIND, None),
                   f"bind mount {path}")
            fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            yield fd
        finally:
            setns(home)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        remove(name)
        raise
    finally:
        os.close(home)


def create(name: str) -> int:
    """Create namespace `name`; returns an fd on it (the caller closes it)."""
    with created(name) as fd:
        return fd


def remove(name: str) -> bool:
    """Unmount and unlink /run/netns/name; True if something was there. Tolerates what is gone."""
    path = netns_path(name)
    _libc.umount2(str(path).encode(), MNT_DETACH)
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def names(prefix: str = "") -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def exists(name: str) -> bool:
    return netns_path(name).exists()


def write_sysctl(ns_fd: int, key: str, value: str) -> None:
    """Write net.* sysctl `key` (dotted) inside a namespace: /proc/sys/net follows the thread's netns."""
    from cnikit.fabric import writable_sys

    with entered(ns_fd):
        writable_sys.write("/proc/sys/" + key.replace(".", "/"), value)
