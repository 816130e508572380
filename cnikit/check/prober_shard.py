"""One probing thread of the prober process: its own socket in every pod (shard i on UDP
port PORT+i), its own epoll loop, and the pairs whose source is at every n-th position.

A shard's probe goes from its socket in one pod to its socket in another, and the answer
comes back the same way: a shard never waits on another one, so a probe unanswered when
its own queue is empty is lost. Everything about a pair (in flight, misses, failures)
lives in the shard that probes it; shards share nothing they write but `last_probed`
(one float per pod, any writer wins) and the event queue.

Why threads at all: nearly all the work of a probe is the kernel forwarding it through
five namespaces inside `sendto`, and CPython releases the GIL for that. Two shards use
two cores (measured 1.6x one shard on a 10-node, 300-pod mesh); a third only adds GIL
hand-offs (it was slower).

Rounds: round r pairs source position i with destination i+k, k = r mod (N-1) + 1, so all
pairs are covered every N-1 rounds. A mesh with both IPv4 and IPv6 pods is two such rings
(Mesh), each with its own N; a pod never probes one of the other family. With a pace, r is the time slot (monotonic time
divided by the pace), so all shards use the same k at the same time and every pod is a
destination once per round; at full speed (pace 0) each shard runs rounds back to back.

Lingering flows: a removed pod stays in the mesh as a ghost for `linger` seconds (the
peers' long-lived flows to it, which outlive the pod as conntrack and ARP entries do). Each
round every shard sends one probe per ghost to its old IP, addressed to the old pod's id,
from one of its peers at removal (rotating over them). Nobody should answer; an answer from
another pod now holding the IP is a `stale` event (traffic for a deleted pod reached its
successor). Unanswered ghost probes are never misses.
"""

from __future__ import annotations

import collections
import errno
import itertools
import os
import select
import struct
import threading
import traceback
from time import monotonic

PORT = 7471
PROBE = struct.Struct("!cIIQ")  # kind, src id, dst id, seq
ANSWER = struct.Struct("!cIIQI")  # kind, src id, dst id, seq, responder id
REPROBE_MAX = 1000


def is_ipv6(ip: str) -> bool:
    return ":" in ip


class Mesh:
    """What is probed, replaced whole (never changed in place) when pods come or go, so a
    shard reading it from another thread always sees one consistent version.

    Pods of one family probe each other only: no path joins IPv4 and IPv6 (a pod has one
    address, and EC2 does not translate), so a cross-family pair would only ever time out.
    `order` holds the IPv4 pods first, then the IPv6 ones; with both there, each part is a
    ring of its own (rounds: see the module's docstring) and `split` is where the IPv6
    ring starts (0: one family, the whole order is one ring, as it always was). Anchors
    are probed by the pods of their own family."""

    __slots__ = ("order", "anchors", "ips", "ghosts", "split", "anchors_low", "anchors_high")

    def __init__(self, order=(), anchors=(), ips=None, ghosts=()) -> None:
        self.ips: dict[int, str] = dict(ips or {})
        v6 = [p for p in order if is_ipv6(self.ips.get(p, ""))]
        v4 = [p for p in order if not is_ipv6(self.ips.get(p, ""))]
        self.order: tuple[int, ...] = (*v4, *v6)
        self.split = len(v4) if v4 and v6 else 0
        self.anchors: tuple[int, ...] = tuple(anchors)
        anchors6 = tuple(a for a in self.anchors if is_ipv6(self.ips.get(a, "")))
        anchors4 = tuple(a for a in self.anchors if a not in anchors6)
        # Probed by the pods before `split` (by every pod when split is 0), and after it.
        self.anchors_low = anchors6 if v6 and not v4 else anchors4
        self.anchors_high = anchors6
        # (pod id, its old IP, removed at, linger until (monotonic s), its peers then)
        self.ghosts: tuple[tuple[int, str, float, float, tuple[int, ...]], ...] = tuple(ghosts)

    def ring_sizes(self) -> tuple[int, int]:
        """Pods in the first ring and in the second (0 with one family)."""
        n = len(self.order)
        return (self.split, n - self.split) if self.split else (n, 0)

    def peers_of(self, pid: int, among) -> tuple[int, ...]:
        """The pods of `among` in pid's family (the only ones with a path to it)."""
        v6 = is_ipv6(self.ips.get(pid, ""))
        return tuple(p for p in among if p != pid and is_ipv6(self.ips.get(p, "")) == v6)


class Settings:
    """Tunables shared by all shards; the control thread sets them, shards only read."""

    def __init__(self) -> None:
        self.interval = -1.0  # automatic, see pace()
        self.timeout = 0.005
        self.fail_after = 3
        self.max_inflight = 256
        self.confirm_timeout = 0.25
        self.linger = 0.0  # seconds a removed pod's flows are kept up (0: none)

    def pace(self, n: int) -> float:
        """Seconds per round. A negative interval means automatic: ten rounds a second up
        to 500 pods, then fewer, keeping the rate near 5,000 probes a second (and every pod
        probed at least twice a second)."""
        if self.interval >= 0:
            return self.interval
        return min(0.5, max(0.1, n / 5000))


class Shard:
    def __init__(self, prober, settings: Settings, index: int = 0, count: int = 1) -> None:
        self.prober = prober  # emit(), flush(), mesh, last_probed
        self.settings = settings
        self.index, self.count = index, count
        self.port = PORT + index
        self.ep = select.epoll()
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.ep.register(self.wake_fd, select.EPOLLIN)
        self.calls: collections.deque = collections.deque()
        self.socks: dict[int, object] = {}  # pod id -> socket
        self.by_fd: dict[int, tuple[int, object]] = {}  # fd -> (pod id, socket)
        self.mesh_seen: Mesh | None = None
        self.mine: list[int] = []  # positions in mesh.order this shard probes from
        self.lonely_anchor_pairs: list[tuple[int, int]] = []  # see _see()
        self.anchor_next: collections.deque[tuple[int, int]] = collections.deque()
        self.inflight: dict[int, tuple[int, int, float]] = {}  # seq -> (src, dst, sent)
        self.sent_q: collections.deque[tuple[float, int]] = collections.deque()
        self.confirm_q: collections.deque[tuple[float, int]] = collections.deque()
        self.confirm: collections.deque[tuple[int, int]] = collections.deque()
        self.retry: collections.deque[tuple[int, int]] = collections.deque()
        self.misses: dict[tuple[int, int], int] = {}
        self.failed: set[tuple[int, int]] = set()
        self.wrong: set[tuple[int, int]] = set()
        self.ghost_next: collections.deque[tuple[int, int, str, float]] = collections.deque()
        self.ghost_inflight: dict[int, tuple[int, str, float, float]] = {}  # seq -> ghost, sent
        self.stale_seen: set[tuple[int, int]] = set()  # (ghost, answering pod) reported
        self.suspect_src: set[int] = set()  # sources with pairs in `wrong` (slow path)
        self.seq = 0
        self.round_i = 0
        self.round_r = -1
        self.round_k = 1
        self.round_k_high = 1  # the IPv6 ring's, when the mesh has both families
        # Counters only this shard writes and never resets; the control thread takes
        # differences once a second.
        self.counts = {"sent": 0, "ok": 0, "timeouts": 0, "wrong": 0, "late": 0,
                       "send_errors": 0, "answer_errors": 0, "ghost_sent": 0, "stale": 0}
        self.running = True
        self.thread = threading.Thread(target=self.loop, name="prober-shard", daemon=True)

    # -- calls from the control thread ---------------------------------------------------

    def call(self, fn, *args) -> threading.Event:
        """Run fn(*args) in this shard's thread at a safe point; set the event when done."""
        done = threading.Event()
        self.calls.append((fn, args, done))
        os.eventfd_write(self.wake_fd, 1)
        return done

    def wait(self, done: threading.Event) -> None:
        while not done.wait(0.1):
            if not self.thread.is_alive():
                raise RuntimeError("a prober shard stopped")

    def stop(self) -> None:
        self.running = False
        os.eventfd_write(self.wake_fd, 1)

    def _run_calls(self) -> None:
        try:
            os.eventfd_read(self.wake_fd)
        except BlockingIOError:
            pass
        while self.calls:
            fn, args, done = self.calls.popleft()
            try:
                fn(*args)
            finally:
                done.set()

    # -- pods (run in this shard's thread through call()) --------------------------------

    def adopt(self, socks: dict[int, object]) -> None:
        for pid, s in socks.items():
            self.socks[pid] = s
            self.by_fd[s.fileno()] = (pid, s)
            self.ep.register(s.fileno(), select.EPOLLIN)

    def drop(self, gone: set[int]) -> None:
        for pid in gone & set(self.socks):
            s = self.socks.pop(pid)
            self.ep.unregister(s.fileno())
            del self.by_fd[s.fileno()]
            s.close()

        def keep(pair) -> bool:
            return pair[0] not in gone and pair[1] not in gone

        self.anchor_next = collections.deque(filter(keep, self.anchor_next))
        self.misses = {k: v for k, v in self.misses.items() if keep(k)}
        self.failed = set(filter(keep, self.failed))
        self.wrong = set(filter(keep, self.wrong))
        self.suspect_src = {k[0] for k in self.wrong}
        self.retry = collections.deque(filter(keep, self.retry))
        self.ghost_next = collections.deque(g for g in self.ghost_next if g[0] not in gone)
        self.confirm = collections.deque(filter(keep, self.confirm))
        self.inflight = {s: v for s, v in self.inflight.items() if keep(v)}

    def _see(self, mesh: Mesh) -> None:
        """Take a new mesh: every n-th position is this shard's to probe from, but for a pod
        alone in its family's ring: it has no peer, and probes only its family's anchors
        (once a round), which still tell whether it is lost."""
        low, high = mesh.ring_sizes()
        lonely = {i: anchors for i, size, anchors in ((0, low, mesh.anchors_low),
                                                      (low, high, mesh.anchors_high))
                  if size == 1}
        self.mine = [i for i in range(self.index, len(mesh.order), self.count)
                     if i not in lonely]
        self.lonely_anchor_pairs = [(mesh.order[i], a) for i, anchors in lonely.items()
                                    if i % self.count == self.index for a in anchors]
        self.round_i = min(self.round_i, len(self.mine))
        self.mesh_seen = mesh

    # -- probing -------------------------------------------------------------------------

    def next_pair(self, now: float) -> tuple[int, int] | None:
        if self.retry:
            return self.retry.popleft()
        if self.anchor_next:
            return self.anchor_next.popleft()
        mesh = self.prober.mesh
        if mesh is not self.mesh_seen:
            self._see(mesh)
        order = mesh.order
        n = len(order)
        if n < 2 or not self.mine:
            return None
        if self.round_i >= len(self.mine):
            pace = self.settings.pace(n)
            r = int(now / pace) if pace > 0 else self.round_r + 1
            if r == self.round_r:
                return None  # this round's slot is not over
            self.round_r, self.round_i = r, 0
            low, high = mesh.ring_sizes()
            self.round_k = r % max(1, low - 1) + 1
            self.round_k_high = r % max(1, high - 1) + 1
            # Failed and wrongly answered pairs are re-probed every round, so recovery
            # shows within one interval rather than once every N-1 rounds.
            self.retry.extend(itertools.islice(self.failed | self.wrong, REPROBE_MAX))
            self.anchor_next.extend(self.lonely_anchor_pairs)
            if mesh.ghosts or self.ghost_inflight:
                self._queue_ghosts(mesh, now)
            if self.retry:
                return self.retry.popleft()
        split = mesh.split
        while self.round_i < len(self.mine):
            i = self.mine[self.round_i]
            self.round_i += 1
            src = order[i]
            # The round's offset was drawn for the ring sizes when it began: taken modulo
            # the ring's size now, so that a pod leaving mid-round (a smaller ring) never
            # makes a pod its own destination (such a pair only ever times out).
            if not split or i < split:
                base, size, k, anchors = 0, split or n, self.round_k, mesh.anchors_low
            else:
                base, size, k, anchors = split, n - split, self.round_k_high, mesh.anchors_high
            if anchors:
                self.anchor_next.extend((src, a) for a in anchors)
            if size < 2:
                continue  # alone in its ring: its anchors are all it probes
            dst = order[base + (i - base + (k - 1) % (size - 1) + 1) % size]
            return src, dst
        return None

    def _queue_ghosts(self, mesh: Mesh, now: float) -> None:
        """One probe per lingering ghost this round, from the next of this shard's pods."""
        old = now - 1.0
        self.ghost_inflight = {q: g for q, g in self.ghost_inflight.items() if g[3] >= old}
        turn = self.round_r * self.count + self.index
        for gid, ip, since, until, peers in mesh.ghosts:
            # Only the pods that were its peers when it went hold flows to it.
            if until > now and peers:
                self.ghost_next.append((peers[(turn + gid) % len(peers)], gid, ip, since))

    def _send_ghost(self, src: int, gid: int, ip: str, since: float, now: float) -> bool:
        """False when the socket is full (try later)."""
        s = self.socks.get(src)
        if s is None:
            return True
        self.seq += 1
        try:
            s.sendto(PROBE.pack(b"P", src, gid, self.seq), (ip, self.port))
        except BlockingIOError:
            return False
        except OSError:
            return True  # no route to a dead pod's IP is what should happen
        self.ghost_inflight[self.seq] = (gid, ip, since, now)
        self.counts["ghost_sent"] += 1
        return True

    def round_due(self, now: float) -> bool:
        mesh = self.prober.mesh
        if mesh is not self.mesh_seen:
            return True  # next_pair() takes it in
        n = len(mesh.order)
        if n < 2 or not self.mine:
            return False
        if self.round_i < len(self.mine):
            return True
        pace = self.settings.pace(n)
        return pace <= 0 or int(now / pace) != self.round_r

    def send(self, now: float) -> None:
        while self.ghost_next:
            g = self.ghost_next[0]
            if not self._send_ghost(g[0], g[1], g[2], g[3], now):
                return
            self.ghost_next.popleft()
        while self.confirm:
            src, dst = self.confirm.popleft()
            if self._send_one(src, dst, now, self.confirm_q) is False:
                self.confirm.appendleft((src, dst))  # socket full: next time
                return
        inflight, limit = self.inflight, self.settings.max_inflight
        while len(inflight) < limit:
            pair = self.next_pair(now)
            if pair is None:
                return
            if self._send_one(pair[0], pair[1], now, self.sent_q) is False:
                self.retry.appendleft(pair)
                return

    def _send_one(self, src: int, dst: int, now: float, queue) -> bool | None:
        """False when the socket is full (try later); None after a send error or for a pod
        that is gone."""
        s = self.socks.get(src)
        ip = self.prober.mesh.ips.get(dst)
        if s is None or ip is None:
            return None
        self.seq += 1
        try:
            s.sendto(PROBE.pack(b"P", src, dst, self.seq), (ip, self.port))
        except BlockingIOError:
            return False
        except OSError as e:
            self.counts["send_errors"] += 1
            self.miss(src, dst, now, f"send: {errno.errorcode.get(e.errno, e.errno)}",
                      confirming=queue is self.confirm_q)
            return None
        self.inflight[self.seq] = (src, dst, now)
        queue.append((now, self.seq))
        self.counts["sent"] += 1
        return True

    def receive(self, fd: int, now: float) -> None:
        """One datagram per readiness event: epoll is level-triggered, so anything left
        is reported again, and no EAGAIN exception is paid per event."""
        owner = self.by_fd.get(fd)
        if owner is None:
            return
        me, s = owner
        try:
            data, addr = s.recvfrom(64)
        except OSError:
            return
        if len(data) == PROBE.size and data[:1] == b"P":
            _k, src, dst, seq = PROBE.unpack(data)
            try:
                s.sendto(ANSWER.pack(b"A", src, dst, seq, me), addr)
            except OSError:
                self.counts["answer_errors"] += 1
        elif len(data) == ANSWER.size and data[:1] == b"A":
            _k, src, dst, seq, by = ANSWER.unpack(data)
            if self.inflight.pop(seq, None) is None:
                ghost = self.ghost_inflight.pop(seq, None)
                if ghost is None:
                    self.counts["late"] += 1
                elif by != dst:
                    self.stale(src, ghost, by, now)
            elif by == dst and src not in self.suspect_src and (src, dst) not in self.misses:
                self.counts["ok"] += 1  # the common case, kept short
                self.prober.last_probed[dst] = now
            else:
                self.answered(src, dst, by, now)

    def stale(self, src: int, ghost: tuple[int, str, float, float], by: int, now: float) -> None:
        """A probe of a removed pod's lingering flow was answered by another pod."""
        gid, ip, since, _sent = ghost
        self.counts["stale"] += 1
        if (gid, by) not in self.stale_seen:
            self.stale_seen.add((gid, by))
            self.prober.emit("stale", src=src, dst=gid, by=by, ip=ip,
                             after=round(now - since, 3))

    def answered(self, src: int, dst: int, by: int, now: float) -> None:
        key = (src, dst)
        self.prober.last_probed[dst] = now
        if by != dst:
            self.counts["wrong"] += 1
            if key not in self.wrong:
                self.wrong.add(key)
                self.suspect_src.add(src)
                self.prober.emit("wrong", src=src, dst=dst, by=by)
        else:
            self.counts["ok"] += 1
            if key in self.wrong:
                self.wrong.discard(key)
                self.prober.emit("right", src=src, dst=dst)
                if not any(k[0] == src for k in self.wrong):
                    self.suspect_src.discard(src)
        if self.misses.pop(key, None) is not None and key in self.failed:
            self.failed.discard(key)
            self.prober.emit("recover", src=src, dst=dst)

    def miss(self, src: int, dst: int, now: float, reason: str, confirming: bool = False) -> None:
        """A probe went unanswered. After `fail_after` quick misses in a row one more probe
        with the long `confirm_timeout` decides: a loaded machine answers late, a lost IP
        never does."""
        key = (src, dst)
        self.prober.last_probed[dst] = now
        n = self.misses.get(key, 0) + 1
        self.misses[key] = n
        if key in self.failed:
            return
        if confirming and n > self.settings.fail_after:  # no answer came in between either
            self.failed.add(key)
            self.prober.emit("fail", src=src, dst=dst, reason=reason, misses=n)
        elif n >= self.settings.fail_after:
            self.confirm.append(key)
        else:
            self.retry.append(key)

    def expire(self, now: float, queue_empty: bool) -> None:
        """Time out probes, but only once the event queue is empty: this shard answers its
        own probes (its sockets are at both ends), so an empty queue means no answer is on
        its way. A shard that was descheduled, or waited for the GIL, must not blame the
        network."""
        inflight = self.inflight
        for q, timeout, confirming in ((self.sent_q, self.settings.timeout, False),
                                       (self.confirm_q, self.settings.confirm_timeout, True)):
            limit = now - timeout
            hard = now - 20 * timeout
            while q and q[0][0] < limit and (queue_empty or q[0][0] < hard):
                _t, seq = q.popleft()
                probe = inflight.pop(seq, None)
                if probe is not None:
                    self.counts["timeouts"] += 1
                    self.miss(probe[0], probe[1], now, "timeout", confirming)
        if not inflight:
            self.sent_q.clear()
            self.confirm_q.clear()

    def loop(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - a bug: say why, and end the whole prober
            traceback.print_exc()
            self.prober.running = False
        finally:
            self._run_calls()  # nobody waits forever on a call made while stopping
            for s in self.socks.values():
                s.close()
            self.ep.close()
            # wake_fd stays open: the control thread may still write it (stop()), and
            # closes it once this thread is gone (close()).

    def close(self) -> None:
        """After the thread ended: release the wake-up eventfd."""
        if not self.thread.is_alive():
            os.close(self.wake_fd)

    def _loop(self) -> None:
        # Only stop() ends the loop (not the control thread's own flag): the control thread
        # outlives its shards and owns the wake-up fd they are stopped through.
        wake, prober = self.wake_fd, self.prober
        while self.running:
            now = monotonic()
            self.send(now)
            events = self.ep.poll(self._idle_wait(now), 512)
            now = monotonic()
            for fd, _mask in events:
                if fd == wake:
                    self._run_calls()
                else:
                    self.receive(fd, now)
            self.expire(now, queue_empty=not events)
            if prober.events:
                prober.flush()

    def _idle_wait(self, now: float) -> float:
        """How long epoll may sleep: 0 while there is a probe to send, else until the oldest
        probe expires or the next round starts."""
        if self.confirm or self.ghost_next or (len(self.inflight) < self.settings.max_inflight and
                            (self.retry or self.anchor_next or self.round_due(now))):
            return 0.0
        deadline = now + 0.25
        if self.sent_q:
            deadline = min(deadline, self.sent_q[0][0] + self.settings.timeout)
        if self.confirm_q:
            deadline = min(deadline, self.confirm_q[0][0] + self.settings.confirm_timeout)
        n = len(self.prober.mesh.order)
        pace = self.settings.pace(n)
        if n >= 2 and pace > 0:
            deadline = min(deadline, (int(now / pace) + 1) * pace)
        return max(0.0, deadline - now)
