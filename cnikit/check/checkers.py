"""Checkers: folds over the history that open and close violations, with timestamps.

Each checker sees every entry in order (`step`), live or replayed from a saved history, and
keeps `open` (violations still holding) and `closed` ones. They read only the history:
  client ok  pod-add {pod, node, instance_id, ip}   pod-delete {pod}
  prober     fail/recover {src, dst, reason}  wrong/right {src, dst, by}  stats {...}
  monitor    ownership {full, set: {ip: [instance, eni, primary]}, unset: [ip],
                        prefixes_set: {cidr: [instance, eni]}, prefixes_unset: [cidr]}
             daemon-view {instance_id, ips}
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field

VIOLATION, WARNING = "violation", "warning"
ANCHOR_PREFIX = "@"  # probe targets that are fixed points of the network, never blamed


@dataclass
class Violation:
    kind: str
    subject: str
    since: float
    until: float | None = None
    severity: str = VIOLATION
    detail: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


# kind -> checker class, in definition order (a checker may read one defined before it).
CHECKERS: dict[str, type[Checker]] = {}


class Checker:
    """A fold over the history. A subclass with a `kind` registers itself by being defined:
    every run then uses it. `step(entry, run)` sees each entry in order; `run` has the live
    pods (`run.pods`, `run.by_ip`) and the other checkers (`run.checker(kind)`)."""

    kind = ""
    severity = VIOLATION

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if cls.kind:
            CHECKERS[cls.kind] = cls

    def __init__(self, options: dict | None = None) -> None:
        self.options = options or {}
        self.open: dict[str, Violation] = {}
        self.closed: list[Violation] = []

    def step(self, entry: dict, run) -> None:
        raise NotImplementedError

    def _open(self, subject: str, at: float, **detail) -> None:
        v = self.open.get(subject)
        if v is None:
            self.open[subject] = Violation(self.kind, subject, at, None, self.severity, detail)
        else:
            v.detail.update(detail)

    def _close(self, subject: str, at: float) -> None:
        v = self.open.pop(subject, None)
        if v is not None:
            v.until = at
            self.closed.append(v)

    def all(self) -> list[Violation]:
        return self.closed + list(self.open.values())


class PodState:
    """Live pods as the history tells them (shared by all checkers)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}  # name -> {node, instance_id, ip}
        self.by_ip: dict[str, set[str]] = {}

    def step(self, e: dict) -> None:
        if e["process"] != "client" or e["type"] != "ok":
            return
        v = e["value"] or {}
        if e["f"] == "pod-add":
            self.pods[v["pod"]] = v
            self.by_ip.setdefault(v["ip"], set()).add(v["pod"])
        elif e["f"] == "pod-delete" and v.get("pod") in self.pods:
            p = self.pods.pop(v["pod"])
            holders = self.by_ip.get(p["ip"], set())
            holders.discard(v["pod"])
            if not holders:
                self.by_ip.pop(p["ip"], None)


class Reachability(Checker):
    """Every pod reachable from every other. Failing pairs are attributed to the fewest pods
    that explain them all (greedy cover), so one lost pod does not blame its peers."""

    kind = "unreachable"

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.failing: set[tuple[str, str]] = set()

    def step(self, e: dict, state) -> None:
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if e["process"] == "prober" and f in ("fail", "recover"):
            key = (v["src"], v["dst"])
            if f == "fail":
                self.failing.add(key)
            else:
                self.failing.discard(key)
        elif e["process"] == "client" and e["type"] == "ok" and f == "pod-delete":
            pod = v.get("pod")
            self.failing = {k for k in self.failing if pod not in k}
        else:
            return
        blamed = self.attribute()
        for pod in list(self.open):
            if pod not in blamed:
                self._close(pod, at)
        for pod, peers in blamed.items():
            self._open(pod, at, peers=sorted(peers)[:20], failing_pairs=len(peers))

    def attribute(self) -> dict[str, set[str]]:
        """pod -> peers it fails with, for the pods blamed for the failing pairs."""
        peers: dict[str, set[str]] = {}
        for a, b in self.failing:
            peers.setdefault(a, set()).add(b)
            peers.setdefault(b, set()).add(a)
        if len(self.failing) > 5000:
            return peers
        blamed: dict[str, set[str]] = {}
        # A pod that fails with an anchor (the VPC router) is lost whatever its peers say;
        # an anchor itself is never blamed.
        for anchor in [p for p in peers if p.startswith(ANCHOR_PREFIX)]:
            for pod in peers.pop(anchor):
                blamed[pod] = peers[pod]
        left = {p: {q for q in s if q not in blamed and not q.startswith(ANCHOR_PREFIX)}
                for p, s in peers.items() if p not in blamed}
        while any(left.values()):
            pod = max(sorted(left), key=lambda p: len(left[p]))
            blamed[pod] = peers[pod]
            for other in left.pop(pod):
                left[other].discard(pod)
        return blamed


class SharedIp(Checker):
    """No two pods hold the same IP: two pod-adds with one IP, or a probe answered by a pod
    other than the one probed."""

    kind = "shared-ip"

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.wrong: dict[str, set[tuple[str, str, str]]] = {}  # ip -> {(src, dst, by)}

    def step(self, e: dict, state) -> None:
        f, v, at = e["f"], e["value"] or {}, e["time"]
        touched: set[str] = set()
        if e["process"] == "prober" and f in ("wrong", "right"):
            pod = state.pods.get(v["dst"])
            if pod is None:
                return
            ip = pod["ip"]
            marks = self.wrong.setdefault(ip, set())
            if f == "wrong":
                marks.add((v["src"], v["dst"], v["by"]))
            else:
                for m in [m for m in marks if m[:2] == (v["src"], v["dst"])]:
                    marks.discard(m)
            touched.add(ip)
        elif e["process"] == "client" and e["type"] == "ok" and f in ("pod-add", "pod-delete"):
            if f == "pod-add":
                touched.add(v["ip"])
            else:
                for ip, marks in self.wrong.items():
                    if any(v.get("pod") in m for m in marks):
                        self.wrong[ip] = {m for m in marks if v.get("pod") not in m}
                        touched.add(ip)
                touched |= {ip for ip in self.open}
        for ip in touched:
            holders = sorted(state.by_ip.get(ip, ()))
            marks = self.wrong.get(ip, set())
            if len(holders) > 1 or marks:
                answered = sorted({m[2] for m in marks})
                self._open(ip, at, pods=holders, answered_by=answered,
                           evidence="probe answered by another pod" if marks else "pod-add")
            else:
                self._close(ip, at)


class Ownership(Checker):
    """Every pod IP is held in EC2 by an ENI of the pod's own node (or a /28 prefix on one)."""

    kind = "ip-not-owned"

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.ips: dict[str, list] = {}
        self.prefixes: dict[str, list] = {}
        self.known = False

    def owner(self, ip: str) -> str | None:
        o = self.ips.get(ip)
        if o is not None:
            return o[0]
        addr = ipaddress.ip_address(ip)
        for cidr, p in self.prefixes.items():
            if addr in ipaddress.ip_network(cidr):
                return p[0]
        return None

    def step(self, e: dict, state) -> None:
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if e["process"] == "monitor" and f == "ownership":
            if v.get("full"):
                self.ips, self.prefixes = {}, {}
            self.ips.update(v.get("set", {}))
            for ip in v.get("unset", []):
                self.ips.pop(ip, None)
            self.prefixes.update(v.get("prefixes_set", {}))
            for cidr in v.get("prefixes_unset", []):
                self.prefixes.pop(cidr, None)
            self.known = True
            pods = list(state.pods)
        elif e["process"] == "client" and e["type"] == "ok" and f in ("pod-add", "pod-delete"):
            pods = [v.get("pod")]
        else:
            return
        if not self.known:
            return
        for name in pods:
            pod = state.pods.get(name)
            if pod is None:
                self._close(name, at)
                continue
            holder = self.owner(pod["ip"])
            if holder != pod["instance_id"]:
                self._open(name, at, ip=pod["ip"], node=pod["instance_id"], held_by=holder)
            else:
                self._close(name, at)


class Leaks(Checker):
    """An IP EC2 assigned to one of our nodes, unknown to the daemon and to every pod for
    longer than `grace` seconds. A warning class of its own: wasted, not broken."""

    kind = "leak"
    severity = WARNING

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.grace = float(self.options.get("leak_grace", 60.0))
        self.daemon: dict[str, set[str]] = {}  # instance -> ips the daemon knows
        self.unknown_since: dict[str, float] = {}

    def step(self, e: dict, state) -> None:
        ownership = state.checker(Ownership.kind)
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if e["process"] == "monitor" and f == "daemon-view":
            self.daemon[v["instance_id"]] = set(v.get("ips", []))
        elif not (e["process"] == "monitor" and f == "ownership") and not (
                e["process"] == "prober" and f == "stats") and not (
                e["process"] == "client" and e["type"] == "ok"):
            return
        if ownership is None or not ownership.known:
            return
        candidates = set()
        for ip, (instance, _eni, primary) in ownership.ips.items():
            # Without a view of the build's pool (no [observe] port) a warm address cannot
            # be told from a leak: no warning then.
            if instance not in self.daemon:
                continue
            if primary or ip in state.by_ip or ip in self.daemon[instance]:
                continue
            candidates.add(ip)
            self.unknown_since.setdefault(ip, at)
            if at - self.unknown_since[ip] >= self.grace:
                self._open(ip, self.unknown_since[ip] + self.grace, node=instance)
        for ip in [ip for ip in self.unknown_since if ip not in candidates]:
            del self.unknown_since[ip]
            self._close(ip, at)


class Unprobed(Checker):
    """Each pod must be probed at least once a second (a prober health check: a warning)."""

    kind = "unprobed"
    severity = WARNING

    def step(self, e: dict, state) -> None:
        if e["process"] != "prober" or e["f"] != "stats":
            return
        stale = set((e["value"] or {}).get("stale", []))
        at = e["time"]
        for pod in list(self.open):
            if pod not in stale:
                self._close(pod, at)
        for pod in stale & set(state.pods):
            self._open(pod, at)
