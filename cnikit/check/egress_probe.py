"""IPv6 pods' IPv4 egress, probed from outside the build: from inside each IPv6 pod's
namespace, a UDP probe to an IPv4 echo in the VPC (the node's SNAT makes it the node's
traffic, upstream's egress-cni), answered back the same way.

Design-agnostic: a pod whose namespace holds no IPv4 route (a build without IPv4 egress)
is not judged; one that has a route and gets no answer within `grace` of its ADD, or loses
its answers for `grace` later, is reported (`egress` fail, then recover), and the
`no-ipv4-egress` checker turns that into a violation. One thread, one socket per pod: runs
have a few IPv6 pods, so the prober's epoll machinery is not needed here.
"""

from __future__ import annotations

import errno
import select
import socket
import struct
import threading
import time

from cnikit.check.history import History
from cnikit.fabric import netns

PROCESS = "egress"
PORT = 7470  # the echo's, in the VPC namespace
PROBE = struct.Struct("!4sIQ")  # magic, pod number, sequence


class EgressProbe:
    def __init__(self, fabric, history: History, interval: float = 0.05, grace: float = 1.0):
        self.fabric = fabric
        self.history = history
        self.interval, self.grace = interval, grace
        self._lock = threading.Lock()
        self._pods: dict[int, dict] = {}  # number -> {name, sock, since, last_ok, failing}
        self._numbers = iter(range(1, 1 << 31))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._echo: socket.socket | None = None
        self.anchor = ""

    def start(self) -> EgressProbe:
        from cnikit.fabric import routes

        self.anchor = routes.router_of(self.fabric.topo.subnet_cidr)
        with netns.entered(self.fabric.vpc.fd):
            self._echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._echo.bind((self.anchor, PORT))
        self._echo.settimeout(0.2)
        for fn, name in ((self._answer, "egress-echo"), (self._run, "egress-probe")):
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(2)
        with self._lock:
            for p in self._pods.values():
                p["sock"].close()
            self._pods.clear()
        if self._echo is not None:
            self._echo.close()

    def add(self, pod) -> None:
        """Probe this IPv6 pod's IPv4 egress from now on (an IPv4 pod is not judged here)."""
        if ":" not in pod.ip:
            return
        self.remove(pod.name)  # a pod kept after a failed DEL comes back: probed afresh
        with netns.entered(pod.ns.fd):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
        try:
            s.connect((self.anchor, PORT))
        except OSError as e:
            s.close()
            if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                return  # no IPv4 route: this build gives its pods no IPv4 egress
            raise
        with self._lock:
            n = next(self._numbers)
            self._pods[n] = {"name": pod.name, "sock": s, "since": time.monotonic(),
                             "last_ok": None, "failing": False, "seq": 0}

    def judged(self, name: str, since: float) -> bool:
        """Whether the pod's egress has been judged since monotonic time `since`: an answer
        heard after it, or the pod reported silent (what a scenario waits on)."""
        with self._lock:
            for p in self._pods.values():
                if p["name"] == name:
                    return p["failing"] or (p["last_ok"] or 0.0) > since
        return True  # not probed (no IPv4 route, or gone): nothing to wait for

    def remove(self, name: str) -> None:
        with self._lock:
            for n, p in list(self._pods.items()):
                if p["name"] == name:
                    p["sock"].close()
                    del self._pods[n]

    def _answer(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._echo.recvfrom(64)
                self._echo.sendto(data, peer)
            except (TimeoutError, OSError):
                continue

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                pods = list(self._pods.items())
            for n, p in pods:
                p["seq"] += 1
                try:
                    p["sock"].send(PROBE.pack(b"EGR4", n, p["seq"]))
                except OSError:
                    pass  # no route now, or an unreachable error queued: judged by silence
            deadline = time.monotonic() + min(0.02, self.interval / 2)
            self._collect(pods, deadline)
            self._judge(pods)

    def _collect(self, pods, deadline: float) -> None:
        socks = {p["sock"].fileno(): p for _, p in pods if p["sock"].fileno() >= 0}
        while socks and (left := deadline - time.monotonic()) > 0:
            try:
                ready, _, _ = select.select(list(socks), [], [], left)
            except (OSError, ValueError):
                return  # a pod removed (its socket closed) meanwhile: the next round goes on

            for fd in ready:
                p = socks[fd]
                try:
                    while True:
                        data = p["sock"].recv(64)
                        if len(data) == PROBE.size:
                            p["last_ok"] = time.monotonic()
                except OSError:
                    pass

    def _judge(self, pods) -> None:
        now = time.monotonic()
        for _, p in pods:
            heard = p["last_ok"]
            silent_since = heard if heard is not None else p["since"]
            if not p["failing"] and now - silent_since > self.grace:
                p["failing"] = True
                self.history.info(PROCESS, "fail", {"pod": p["name"], "anchor": self.anchor,
                                                    "silent_s": round(now - silent_since, 3),
                                                    "ever": heard is not None})
            elif p["failing"] and heard is not None and now - heard <= self.grace:
                p["failing"] = False
                self.history.info(PROCESS, "recover", {"pod": p["name"]})
