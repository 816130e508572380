"""/proc/sys made writable inside the kit's own container, so `cnikit up` / `cnikit run` can
set their namespaces' sysctls there without a privileged container.

Docker and podman mount /proc/sys read-only in a container that is not privileged (Docker's
`systempaths=unconfined` would lift it, but Compose v1 hands the option to the Engine API,
which refuses it). The container of compose/docker-compose.yml has CAP_SYS_ADMIN and no
AppArmor confinement, so a bind remount without MS_RDONLY lifts it, for that container's
mount namespace alone. Done only where the container says so (CNIKIT_REMOUNT_PROC_SYS=1,
which the Compose file sets for the kit's containers), and only once a write has failed with
EROFS: never on a host, nor in a container the kit did not make (this very machine may be
one: a marker file such as /.dockerenv proves nothing).
"""

from __future__ import annotations

import ctypes
import errno
import os

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
PROC_SYS = "/proc/sys"
OPT_IN = "CNIKIT_REMOUNT_PROC_SYS"


def allowed() -> bool:
    return os.environ.get(OPT_IN) == "1"


def make_writable() -> bool:
    """Remount /proc/sys read-write in this container; True when it did."""
    if not allowed():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.mount(None, PROC_SYS.encode(), None, MS_REMOUNT | MS_BIND, None) == 0


def write(path: str, value: str) -> None:
    """Write a /proc/sys file; on EROFS inside a container, remount and write again."""
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as e:
        if e.errno != errno.EROFS or not make_writable():
            raise
        with open(path, "w") as f:
            f.write(value)
