"""`python -m cnikit.containers.enter NETNS_PATH -- ARGV...`: enter a network namespace by
path, then exec ARGV. Docker's stand-in for podman's `--network ns:PATH` (Python 3.11 has no
os.setns: ctypes)."""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNET = 0x40000000


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m cnikit.containers.enter NETNS_PATH -- ARGV...", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fd = os.open(argv[0], os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        print(f"enter: {argv[0]}: {e.strerror}", file=sys.stderr)
        return 2
    if libc.setns(fd, CLONE_NEWNET) != 0:
        print(f"enter: setns {argv[0]}: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 2
    os.close(fd)
    os.execv(argv[2], argv[2:])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
