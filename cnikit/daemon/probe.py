"""A tiny UDP reachability probe between pod namespaces, for the daemon's integration tests.

One socket per pod, made inside the pod's namespace and bound to the pod's IP; a probe
sends from A to B, B echoes, A must get the echo back before a deadline. No threads.
"""

from __future__ import annotations

import select
import socket

from cnikit.fabric import netns

PORT = 7077


class Prober:
    def __init__(self):
        self.socks: dict[str, socket.socket] = {}  # pod name -> socket

    def add(self, name: str, ns_fd: int, ip: str) -> None:
        with netns.entered(ns_fd):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, PORT))
        s.setblocking(False)
        self.socks[name] = s

    def remove(self, name: str) -> None:
        s = self.socks.pop(name, None)
        if s is not None:
            s.close()

    def close(self) -> None:
        for name in list(self.socks):
            self.remove(name)

    def _recv(self, s: socket.socket, timeout: float):
        r, _, _ = select.select([s], [], [], timeout)
        if not r:
            return None
        return s.recvfrom(2048)

    def probe(self, a: str, b: str, b_ip: str, timeout: float = 0.5) -> bool:
        sa, sb = self.socks[a], self.socks[b]
        payload = f"{a}->{b}".encode()
        try:
            sa.sendto(payload, (b_ip, PORT))
        except OSError:
            return False
        got = self._recv(sb, timeout)
        if got is None or got[0] != payload:
            return False
        sb.sendto(payload, got[1])
        back = self._recv(sa, timeout)
        return back is not None and back[0] == payload
