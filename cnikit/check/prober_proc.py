"""The prober process: UDP sockets inside every pod namespace, probed by a few threads.

Run as `python -m cnikit.check.prober_proc [--threads N]` by `cnikit.check.prober.Prober`;
it reads control lines (JSON) on stdin and writes events (JSON lines) on stdout.

Every socket both answers probes (the answer carries the answering pod's id, so an answer
from the wrong pod shows a shared IP) and sends them. Probing is split over shards
(`prober_shard`), one thread, one epoll loop and one socket per pod each; rounds,
timeouts and the fail / recover rules are described there. This module is the control
side: it makes the sockets (entering each namespace once), hands them to the shards, and
sums their counters into one stats event a second.

Anchors (pods added with "anchor": true, e.g. a socket in the VPC router) stay out of the
rounds: instead every pod probes every anchor of its family once per round.

A pod whose ip has a ':' is an IPv6 pod: its sockets are AF_INET6, bound to '::' (a probe's
address (ip, port) is the same tuple for both families). It probes and is probed by IPv6
pods only (prober_shard.Mesh).

A removed pod lingers as a ghost for `linger` seconds: its peers' flows to its old IP go on
(prober_shard), and an answer from another pod is a `stale` event.

Control:  {"op": "add", "pods": [{"id", "netns", "ip", "anchor"}]}   {"op": "remove", "ids": [...]}
          {"op": "config", "interval", "timeout", "fail_after", "max_inflight",
                           "confirm_timeout", "linger"}  {"op": "stop"}
Events:   ready, added {ids, errors}, fail {src, dst, reason}, recover {src, dst},
          wrong {src, dst, by}, right {src, dst}, stale {src, dst (the removed pod), by,
          ip, after (seconds since its removal)}, stats {...} once a second.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys
import threading
import time

from cnikit.check.prober_shard import PORT, Mesh, Settings, Shard, is_ipv6

PR_SET_PDEATHSIG = 1
MAX_THREADS = 2  # measured: a third thread only adds GIL hand-offs


def default_threads() -> int:
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


class Prober:
    def __init__(self, out, threads: int = 1) -> None:
        self.out = out
        self.settings = Settings()
        self.mesh = Mesh()
        self.last_probed: dict[int, float] = {}  # pod id -> last probed as destination
        self.events: collections.deque[dict] = collections.deque()
        self.out_lock = threading.Lock()
        n = max(1, threads)
        self.shards = [Shard(self, self.settings, i, n) for i in range(n)]
        self.known: set[int] = set()
        self.running = True
        self.broken = False
        self.ctl_buf = b""
        self.last_counts: dict[str, int] = {}

    # -- output (any thread) -------------------------------------------------------------

    def emit(self, ev: str, **kw) -> None:
        kw["ev"] = ev
        kw["t"] = time.time()
        kw["m"] = time.monotonic()
        self.events.append(kw)

    def flush(self) -> None:
        with self.out_lock:
            lines = []
            while self.events:
                lines.append(json.dumps(self.events.popleft(), separators=(",", ":")) + "\n")
            if lines and not self.broken:
                try:
                    self.out.write("".join(lines))
                    self.out.flush()
                except (BrokenPipeError, ValueError):
                    # The parent stopped reading: nobody is left to probe for.
                    self.broken, self.running = True, False

    # -- pods ----------------------------------------------------------------------------

    def add(self, pods: list[dict]) -> None:
        """Enter each pod's namespace once and make one socket per shard there."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        made: dict[int, list[socket.socket]] = {}
        added, errors, anchors = [], {}, set()
        try:
            for p in pods:
                pid = int(p["id"])
                socks: list[socket.socket] = []
                v6 = is_ipv6(p["ip"])
                family = socket.AF_INET6 if v6 else socket.AF_INET
                try:
                    fd = os.open(p["netns"], os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        _setns(fd)
                        for _ in self.shards:
                            socks.append(socket.socket(family,
                                                       socket.SOCK_DGRAM | socket.SOCK_NONBLOCK))
                    finally:
                        _setns(home)
                        os.close(fd)
                    for shard, s in zip(self.shards, socks, strict=True):
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 18)
                        if v6:
                            # IPv6 only: an IPv4 socket of the same namespace (the VPC's two
                            # anchors) holds 0.0.0.0 on this port.
                            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                        s.bind(("::" if v6 else "0.0.0.0", shard.port))
                except OSError as e:
                    for s in socks:
                        s.close()
                    errors[pid] = str(e)
                    continue
                made[pid] = socks
                if p.get("anchor"):
                    anchors.add(pid)
                added.append(pid)
        finally:
            os.close(home)
        self.remove([pid for pid in made if pid in self.known],
                    linger=False)  # re-added: fresh sockets
        # Sockets first, then the mesh: no shard probes a pod before it answers there.
        calls = [shard.call(shard.adopt, {pid: socks[i] for pid, socks in made.items()})
                 for i, shard in enumerate(self.shards)]
        for shard, done in zip(self.shards, calls, strict=True):
            shard.wait(done)
        now = time.monotonic()
        for pid in made:
            self.last_probed[pid] = now
        self.known |= set(made)
        m = self.mesh
        ips = {**m.ips, **{int(p["id"]): p["ip"] for p in pods if int(p["id"]) in made}}
        self.mesh = Mesh([*m.order, *(p for p in added if p not in anchors)],
                         [*m.anchors, *(p for p in added if p in anchors)], ips,
                         [g for g in m.ghosts if g[0] not in made])
        self.emit("added", ids=added, errors=errors)

    def remove(self, ids: list[int], linger: bool = True) -> None:
        """Stop probing these pods; with `linger`, their flows go on as ghosts."""
        gone = set(ids) & self.known
        if not gone:
            return
        m = self.mesh
        now = time.monotonic()
        ghosts = [g for g in m.ghosts if g[0] not in gone and g[3] > now]
        order = tuple(p for p in m.order if p not in gone)
        if linger and self.settings.linger > 0:
            until = now + self.settings.linger
            ghosts += [(p, m.ips[p], now, until, m.peers_of(p, order)) for p in m.order
                       if p in gone and p in m.ips]
        self.mesh = Mesh(order, [p for p in m.anchors if p not in gone],
                         {p: ip for p, ip in m.ips.items() if p not in gone}, ghosts)
        calls = [shard.call(shard.drop, gone) for shard in self.shards]
        for shard, done in zip(self.shards, calls, strict=True):
            shard.wait(done)
        self.known -= gone
        for pid in gone:
            self.last_probed.pop(pid, None)

    # -- control -------------------------------------------------------------------------

    def control(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            self.running = False  # the parent went away
            return
        self.ctl_buf += data
        while b"\n" in self.ctl_buf:
            line, self.ctl_buf = self.ctl_buf.split(b"\n", 1)
            if not line.strip():
                continue
            msg = json.loads(line)
            op = msg.get("op")
            if op == "add":
                self.add(msg["pods"])
            elif op == "remove":
                self.remove([int(i) for i in msg["ids"]])
                self.emit("removed", ids=msg["ids"])
            elif op == "config":
                st = self.settings
                for key in ("interval", "timeout", "fail_after", "max_inflight",
                            "confirm_timeout", "linger"):
                    if key in msg:
                        setattr(st, key, type(getattr(st, key))(msg[key]))
                self.emit("configured")
            elif op == "stop":
                self.running = False

    def report(self, now: float, period: float) -> None:
        totals = collections.Counter()
        for shard in self.shards:
            totals.update(shard.counts)
        st = {k: v - self.last_counts.get(k, 0) for k, v in totals.items()}
        self.last_counts = dict(totals)
        m = self.mesh
        if any(g[3] <= now for g in m.ghosts):  # flows that outlived their linger: gone
            self.mesh = Mesh(m.order, m.anchors, m.ips, [g for g in m.ghosts if g[3] > now])
        lp = self.last_probed
        stale = [p for p in self.mesh.order if now - lp.get(p, 0) > 1.0]
        self.emit("stats", period=period, sent=st["sent"], ok=st["ok"],
                  timeouts=st["timeouts"], wrong=st["wrong"], late=st["late"],
                  send_errors=st["send_errors"], pods=len(self.mesh.order),
                  failing=sum(len(shard.failed) for shard in self.shards),
                  threads=len(self.shards), ghosts=len(self.mesh.ghosts),
                  ghost_sent=st["ghost_sent"], stale_answers=st["stale"],
                  pairs_per_s=(st["ok"] + st["wrong"]) / period if period else 0.0,
                  stale=stale[:50], stale_count=len(stale))

    def loop(self, ctl_fd: int) -> None:
        os.set_blocking(ctl_fd, False)
        ep = select.epoll()
        ep.register(ctl_fd, select.EPOLLIN)
        for shard in self.shards:
            shard.thread.start()
        last_report = time.monotonic()
        self.emit("ready", pid=os.getpid(), port=PORT, threads=len(self.shards))
        self.flush()
        try:
            while self.running:
                if ep.poll(max(0.0, last_report + 1.0 - time.monotonic())):
                    self.control(ctl_fd)
                now = time.monotonic()
                if now - last_report >= 1.0:
                    self.report(now, now - last_report)
                    last_report = now
                self.flush()
        finally:
            for shard in self.shards:
                shard.stop()
            for shard in self.shards:
                shard.thread.join(5)
                shard.close()
            ep.close()


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, 0x40000000) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


def main() -> int:
    # Die with the parent: a prober outliving its run would hold every pod namespace open.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl: compare with the pid it gave us (checking
    # for pid 1 instead would refuse to run under a parent that *is* pid 1, in a container).
    parent = os.environ.get("CNIKIT_PROBER_PARENT")
    if parent is not None and os.getppid() != int(parent):
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    # The loop makes no reference cycles, but allocates a tuple or two per probe: automatic
    # collections would walk every tracked object tens of times a second for nothing.
    gc.disable()
    # Shards hand the GIL over at every send; when both are busy a waiting shard would
    # otherwise idle up to 5 ms (the default) for it. 0.2 ms: 300-pod mesh 33k -> 51k pairs/s.
    sys.setswitchinterval(0.0002)
    ap = argparse.ArgumentParser(prog="cnikit.check.prober_proc")
    ap.add_argument("--threads", type=int, default=default_threads())
    args = ap.parse_args()
    prober = Prober(sys.stdout, threads=args.threads)
    prober.loop(sys.stdin.fileno())
    prober.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
