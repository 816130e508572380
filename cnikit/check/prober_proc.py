"""The prober process: one UDP socket inside every pod namespace, one epoll loop.

Run as `python -m cnikit.check.prober_proc` by `cnikit.check.prober.Prober`; it reads
control lines (JSON) on stdin and writes events (JSON lines) on stdout.

Every socket both answers probes (the answer carries the answering pod's id, so an answer
from the wrong pod shows a shared IP) and sends them. Pairs are scheduled in rounds: round r
pairs pod i with pod i+k (k cycling through 1..N-1), so every pod is probed once per round as
destination and as source, and all pairs are covered every N-1 rounds. A probe times out
after `timeout` seconds, but only once the event queue is empty (a prober that was
descheduled must not blame the network); after `fail_after` consecutive timeouts one
confirmation probe with a long timeout (`confirm_timeout`) decides whether the pair failed.

Anchors (pods added with "anchor": true, e.g. a socket in the VPC router) stay out of the
rounds: instead every pod probes every anchor once per round.

Control:  {"op": "add", "pods": [{"id", "netns", "ip", "anchor"}]}   {"op": "remove", "ids": [...]}
          {"op": "config", "interval", "timeout", "fail_after", "max_inflight",
                           "confirm_timeout"}  {"op": "stop"}
Events:   ready, added {ids, errors}, fail {src, dst, reason}, recover {src, dst},
          wrong {src, dst, by}, right {src, dst}, stats {...} once a second.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import gc
import itertools
import json
import os
import select
import signal
import socket
import struct
import sys
import time

PORT = 7471
_PROBE = struct.Struct("!cIIQ")  # kind, src id, dst id, seq
_ANSWER = struct.Struct("!cIIQI")  # kind, src id, dst id, seq, responder id
PR_SET_PDEATHSIG = 1
REPROBE_MAX = 1000


class Prober:
    def __init__(self, out) -> None:
        self.out = out
        self.ep = select.epoll()
        self.socks: dict[int, socket.socket] = {}  # pod id -> socket
        self.by_fd: dict[int, int] = {}  # fd -> pod id
        self.ips: dict[int, str] = {}
        self.order: list[int] = []
        self.anchors: list[int] = []
        self.anchor_next: collections.deque[tuple[int, int]] = collections.deque()
        self.interval = -1.0  # automatic, see pace()
        self.timeout = 0.005
        self.fail_after = 3
        self.max_inflight = 256
        self.inflight: dict[int, tuple[int, int, float]] = {}  # seq -> (src, dst, sent)
        self.sent_q: collections.deque[tuple[float, int]] = collections.deque()
        self.confirm_q: collections.deque[tuple[float, int]] = collections.deque()
        self.confirm: collections.deque[tuple[int, int]] = collections.deque()
        self.confirm_timeout = 0.25
        self.retry: collections.deque[tuple[int, int]] = collections.deque()
        self.misses: dict[tuple[int, int], int] = {}
        self.failed: set[tuple[int, int]] = set()
        self.wrong: set[tuple[int, int]] = set()
        self.last_probed: dict[int, float] = {}
        self.seq = 0
        self.round_i = 0
        self.round_k = 1
        self.round_start = 0.0
        self.stats = collections.Counter()
        self.n_ok = 0
        self.n_sent = 0
        self.suspect_src: set[int] = set()  # sources with pairs in `wrong` (slow path)
        self.running = True
        self.ctl_buf = b""
        self.events: list[dict] = []

    # -- output --------------------------------------------------------------------------

    def emit(self, ev: str, **kw) -> None:
        kw["ev"] = ev
        kw["t"] = time.time()
        kw["m"] = time.monotonic()
        self.events.append(kw)

    def flush(self) -> None:
        if self.events:
            self.out.write("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in self.events))
            self.out.flush()
            self.events.clear()

    # -- pods ----------------------------------------------------------------------------

    def add(self, pods: list[dict]) -> None:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        added, errors = [], {}
        try:
            for p in pods:
                pid = int(p["id"])
                try:
                    fd = os.open(p["netns"], os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        _setns(fd)
                        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
                    finally:
                        _setns(home)
                        os.close(fd)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 18)
                    s.bind(("0.0.0.0", PORT))
                except OSError as e:
                    errors[pid] = str(e)
                    continue
                self.remove([pid])
                self.socks[pid] = s
                self.by_fd[s.fileno()] = pid
                self.ips[pid] = p["ip"]
                self.last_probed[pid] = time.monotonic()
                self.ep.register(s.fileno(), select.EPOLLIN)
                (self.anchors if p.get("anchor") else self.order).append(pid)
                added.append(pid)
        finally:
            os.close(home)
        self.emit("added", ids=added, errors=errors)

    def remove(self, ids: list[int]) -> None:
        gone = set(ids) & set(self.socks)
        if not gone:
            return
        for pid in gone:
            s = self.socks.pop(pid)
            self.ep.unregister(s.fileno())
            del self.by_fd[s.fileno()]
            s.close()
            self.ips.pop(pid, None)
            self.last_probed.pop(pid, None)
        self.order = [p for p in self.order if p not in gone]
        self.anchors = [p for p in self.anchors if p not in gone]
        self.anchor_next = collections.deque(k for k in self.anchor_next
                                             if k[0] not in gone and k[1] not in gone)
        for key in [k for k in self.misses if k[0] in gone or k[1] in gone]:
            del self.misses[key]
        self.failed = {k for k in self.failed if k[0] not in gone and k[1] not in gone}
        self.wrong = {k for k in self.wrong if k[0] not in gone and k[1] not in gone}
        self.suspect_src = {k[0] for k in self.wrong}
        self.retry = collections.deque(k for k in self.retry if k[0] not in gone and k[1] not in gone)
        self.confirm = collections.deque(k for k in self.confirm
                                         if k[0] not in gone and k[1] not in gone)
        for seq in [s for s, v in self.inflight.items() if v[0] in gone or v[1] in gone]:
            del self.inflight[seq]
        self.round_i = min(self.round_i, len(self.order))

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
                for key in ("interval", "timeout", "fail_after", "max_inflight",
                            "confirm_timeout"):
                    if key in msg:
                        setattr(self, key, type(getattr(self, key))(msg[key]))
                self.emit("configured")
            elif op == "stop":
                self.running = False

    # -- probing -------------------------------------------------------------------------

    def pace(self) -> float:
        """Seconds per round. A negative interval means automatic: ten rounds a second up
        to 500 pods, then fewer, keeping the rate near 5,000 probes a second (and every pod
        probed at least twice a second)."""
        if self.interval >= 0:
            return self.interval
        return min(0.5, max(0.1, len(self.order) / 5000))

    def next_pair(self, now: float) -> tuple[int, int] | None:
        if self.retry:
            return self.retry.popleft()
        if self.anchor_next:
            return self.anchor_next.popleft()
        n = len(self.order)
        if n < 2:
            return None
        if self.round_i >= n:
            if now < self.round_start + self.pace():
                return None
            self.round_i = 0
            self.round_k = self.round_k % (n - 1) + 1
        if self.round_i == 0:
            self.round_start = now
            # Failed and wrongly answered pairs are re-probed every round, so recovery shows
            # within one interval rather than once every N-1 rounds.
            self.retry.extend(itertools.islice(self.failed | self.wrong, REPROBE_MAX))
        i = self.round_i
        self.round_i += 1
        k = min(self.round_k, n - 1)
        self.anchor_next.extend((self.order[i], a) for a in self.anchors)
        return self.order[i], self.order[(i + k) % n]

    def send(self, now: float) -> None:
        socks, inflight = self.socks, self.inflight
        while self.confirm:
            src, dst = self.confirm.popleft()
            if self._send_one(src, dst, now, self.confirm_q) is False:
                self.confirm.appendleft((src, dst))  # socket full: next time
                return
        while len(inflight) < self.max_inflight:
            pair = self.next_pair(now)
            if pair is None:
                return
            src, dst = pair
            if socks.get(src) is None or dst not in self.ips:
                continue
            if self._send_one(src, dst, now, self.sent_q) is False:
                self.retry.appendleft(pair)
                return

    def _send_one(self, src: int, dst: int, now: float, queue) -> bool | None:
        """False when the socket is full (try later); None after a send error."""
        s = self.socks.get(src)
        ip = self.ips.get(dst)
        if s is None or ip is None:
            return None
        self.seq += 1
        try:
            s.sendto(_PROBE.pack(b"P", src, dst, self.seq), (ip, PORT))
        except BlockingIOError:
            return False
        except OSError as e:
            self.stats["send_errors"] += 1
            self.miss(src, dst, now, f"send: {errno.errorcode.get(e.errno, e.errno)}",
                      confirming=queue is self.confirm_q)
            return None
        self.inflight[self.seq] = (src, dst, now)
        queue.append((now, self.seq))
        self.n_sent += 1
        return True

    def receive(self, fd: int, now: float) -> None:
        """One datagram per readiness event: epoll is level-triggered, so anything left
        is reported again, and no EAGAIN exception is paid per event."""
        me = self.by_fd.get(fd)
        if me is None:
            return
        s = self.socks[me]
        try:
            data, addr = s.recvfrom(64)
        except OSError:
            return
        if len(data) == _PROBE.size and data[:1] == b"P":
            _k, src, dst, seq = _PROBE.unpack(data)
            try:
                s.sendto(_ANSWER.pack(b"A", src, dst, seq, me), addr)
            except OSError:
                self.stats["answer_errors"] += 1
        elif len(data) == _ANSWER.size and data[:1] == b"A":
            _k, src, dst, seq, by = _ANSWER.unpack(data)
            if self.inflight.pop(seq, None) is None:
                self.stats["late"] += 1
            elif by == dst and src not in self.suspect_src and (src, dst) not in self.misses:
                self.n_ok += 1  # the common case, kept short
                self.last_probed[dst] = now
            else:
                self.answered(src, dst, by, now)

    def answered(self, src: int, dst: int, by: int, now: float) -> None:
        key = (src, dst)
        self.last_probed[dst] = now
        if by != dst:
            self.stats["wrong"] += 1
            if key not in self.wrong:
                self.wrong.add(key)
                self.suspect_src.add(src)
                self.emit("wrong", src=src, dst=dst, by=by)
        else:
            self.n_ok += 1
            if key in self.wrong:
                self.wrong.discard(key)
                self.emit("right", src=src, dst=dst)
                if not any(k[0] == src for k in self.wrong):
                    self.suspect_src.discard(src)
        if self.misses.pop(key, None) is not None and key in self.failed:
            self.failed.discard(key)
            self.emit("recover", src=src, dst=dst)

    def miss(self, src: int, dst: int, now: float, reason: str, confirming: bool = False) -> None:
        """A probe went unanswered. After `fail_after` quick misses in a row one more probe
        with the long `confirm_timeout` decides: a loaded machine answers late, a lost IP
        never does."""
        key = (src, dst)
        self.last_probed[dst] = now
        n = self.misses.get(key, 0) + 1
        self.misses[key] = n
        if key in self.failed:
            return
        if confirming and n > self.fail_after:  # no answer came in between either
            self.failed.add(key)
            self.emit("fail", src=src, dst=dst, reason=reason, misses=n)
        elif n >= self.fail_after:
            self.confirm.append(key)
        else:
            self.retry.append(key)

    def expire(self, now: float, queue_empty: bool) -> None:
        inflight = self.inflight
        for q, timeout, confirming in ((self.sent_q, self.timeout, False),
                                       (self.confirm_q, self.confirm_timeout, True)):
            limit = now - timeout
            hard = now - 20 * timeout
            while q and q[0][0] < limit and (queue_empty or q[0][0] < hard):
                _t, seq = q.popleft()
                probe = inflight.pop(seq, None)
                if probe is not None:
                    self.stats["timeouts"] += 1
                    self.miss(probe[0], probe[1], now, "timeout", confirming)
        if not inflight:
            self.sent_q.clear()
            self.confirm_q.clear()

    def report(self, now: float, period: float) -> None:
        stale = [p for p in self.order if now - self.last_probed.get(p, 0) > 1.0]
        st = self.stats
        self.emit("stats", period=period, sent=self.n_sent, ok=self.n_ok, timeouts=st["timeouts"],
                  wrong=st["wrong"], late=st["late"], send_errors=st["send_errors"],
                  pods=len(self.order), failing=len(self.failed),
                  pairs_per_s=(self.n_ok + st["wrong"]) / period if period else 0.0,
                  stale=stale[:50], stale_count=len(stale))
        self.stats.clear()
        self.n_ok = self.n_sent = 0

    def loop(self, ctl_fd: int) -> None:
        os.set_blocking(ctl_fd, False)
        self.ep.register(ctl_fd, select.EPOLLIN)
        last_report = time.monotonic()
        self.emit("ready", pid=os.getpid(), port=PORT)
        self.flush()
        while self.running:
            now = time.monotonic()
            self.send(now)
            wait = self._idle_wait(now)
            events = self.ep.poll(wait, 512)
            now = time.monotonic()
            for fd, _mask in events:
                if fd == ctl_fd:
                    self.control(fd)
                else:
                    self.receive(fd, now)
            self.expire(now, queue_empty=not events)
            if now - last_report >= 1.0:
                self.report(now, now - last_report)
                last_report = now
            self.flush()

    def _idle_wait(self, now: float) -> float:
        """How long epoll may sleep: 0 while there is a probe to send, else until the oldest
        probe expires or the next round starts."""
        n = len(self.order)
        round_due = n >= 2 and (self.round_i < n or now >= self.round_start + self.pace())
        if self.confirm or (len(self.inflight) < self.max_inflight and (self.retry or round_due)):
            return 0.0
        deadline = now + 0.25
        if self.sent_q:
            deadline = min(deadline, self.sent_q[0][0] + self.timeout)
        if self.confirm_q:
            deadline = min(deadline, self.confirm_q[0][0] + self.confirm_timeout)
        if n >= 2 and self.round_i >= n:
            deadline = min(deadline, self.round_start + self.pace())
        return max(0.0, deadline - now)


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
    prober = Prober(sys.stdout)
    try:
        prober.loop(sys.stdin.fileno())
    except BrokenPipeError:
        return 0
    prober.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
