"""Which process group holds a TCP connection: how the kit tells which of a run's cluster
components made an EC2 call.

Every component runs in the run's VPC namespace, so the gate sees each at the same source
address; the connection's port tells them apart. The kernel lists a namespace's sockets
with their inodes (/proc/<pid>/net/tcp, as seen from a process in it), and a process's
descriptors name the socket inodes they hold. Read only when a crash point is about to
fire on a call no node made: a scan of /proc costs milliseconds, once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os


def holds_connection(pgid: int, ip: str, port: int) -> bool:
    """Whether a process of group `pgid` holds the TCP socket whose local end is ip:port
    (a client's end, as a server sees its peer), in that group's network namespace."""
    pids = group_pids(pgid)
    inode = next((i for pid in pids if (i := socket_inode(pid, ip, port)) is not None), None)
    if inode is None:
        return False
    mark = f"socket:[{inode}]"
    for pid in pids:
        with contextlib.suppress(OSError):  # gone, or not ours to read
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == mark:
                        return True
    return False


def group_pids(pgid: int) -> list[int]:
    """The live processes of a process group (a component and what it forked)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the command (which may hold spaces): state, ppid, pgrp.
        if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
            out.append(int(entry))
    return out


def socket_inode(pid: int, ip: str, port: int) -> int | None:
    """The inode of the TCP socket bound locally to ip:port in pid's network namespace."""
    addr = ipaddress.ip_address(ip)
    wanted = {_kernel_hex(addr, port)}
    if addr.version == 4:  # an IPv6 socket's view of an IPv4 peer
        wanted.add(_kernel_hex(ipaddress.IPv6Address(f"::ffff:{ip}"), port))
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)  # the header
                for line in f:
                    fields = line.split()
                    if fields[1] in wanted:
                        return int(fields[9])
        except (OSError, StopIteration):
            continue
    return None


def _kernel_hex(addr: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """An address and port as /proc/net/tcp prints them: each 32-bit word of the address
    in host (little-endian) byte order, in hex, then the port."""
    raw = addr.packed
    words = "".join(raw[i:i + 4][::-1].hex().upper() for i in range(0, len(raw), 4))
    return f"{words}:{port:04X}"
