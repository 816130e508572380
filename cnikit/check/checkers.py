"""Checkers: folds over the history that open and close violations, with timestamps.

Each checker sees every entry in order (`step`), live or replayed from a saved history, and
keeps `open` (violations still holding) and `closed` ones. They read only the history:
  client ok  pod-add {pod, node, instance_id, ip}   pod-delete {pod}
  prober     fail/recover {src, dst, reason}  wrong/right {src, dst, by}  stats {...}
             stale {src, dst (a removed pod), by, ip, after}
  monitor    ownership {full, set: {ip: [instance, eni, primary]}, unset: [ip],
                        prefixes_set: {cidr: [instance, eni]}, prefixes_unset: [cidr]}
             daemon-view {instance_id, ips, assigned: {ip: container}}  daemon-view-error
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
    """An address EC2 gives one of our nodes that the build holds for no pod, for longer than
    `grace` seconds. Seen from outside through the build's own view of its pool (daemon-view
    entries: the [observe] introspection port), in one of two ways:

      assigned-to-deleted  the build's datastore still assigns it to a container whose pod
                           was deleted (pod-delete, with no failed DEL after it): a warning
                           in exploratory runs, a violation when certifying (`strict_leaks`);
      unknown              neither the build's datastore nor any pod has it: always a
                           warning, since EC2 does not say who put an address on an ENI (the
                           nemesis or another tenant may have, behind the build's back).

    Without that view a warm address cannot be told from a leak: nothing is judged for a
    node whose build shows none (or whose view is down: a restarting daemon), and a pod is
    held by the build only in a view asked for after its delete (`at`: a daemon busy with
    EC2 may answer seconds late, with its state of before)."""

    kind = "leak"
    severity = WARNING

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.grace = float(self.options.get("leak_grace", 60.0))
        self.strict = bool(self.options.get("strict_leaks"))
        self.daemon: dict[str, set[str]] = {}  # instance -> ips the daemon knows
        self.assigned: dict[str, dict[str, str]] = {}  # instance -> {ip: container}
        self.asked: dict[str, float] = {}  # instance -> when its view was asked for
        self.deleted: dict[str, float] = {}  # pod (= container id) -> deleted at
        self.unknown_since: dict[str, float] = {}

    def step(self, e: dict, state) -> None:
        ownership = state.checker(Ownership.kind)
        f, v, at, proc = e["f"], e["value"] or {}, e["time"], e["process"]
        if proc == "monitor" and f == "daemon-view":
            self.daemon[v["instance_id"]] = set(v.get("ips", []))
            self.assigned[v["instance_id"]] = dict(v.get("assigned") or {})
            self.asked[v["instance_id"]] = float(v.get("at") or at)
        elif proc == "monitor" and f == "daemon-view-error":
            # The build's view is unknown while its daemon is down: judge nothing there.
            self.daemon.pop(v.get("instance_id"), None)
            self.assigned.pop(v.get("instance_id"), None)
        elif proc == "client" and f == "pod-delete" and v.get("pod"):
            if e["type"] == "ok":
                self.deleted[v["pod"]] = at
            elif e["type"] == "fail":  # DEL not answered: the runtime would retry it
                self.deleted.pop(v["pod"], None)
        elif not (proc == "monitor" and f == "ownership") and not (
                proc == "prober" and f == "stats") and not (
                proc == "client" and e["type"] == "ok"):
            return
        if ownership is None or not ownership.known:
            return
        candidates = set()
        for ip, (instance, _eni, primary) in ownership.ips.items():
            if instance not in self.daemon or primary or ip in state.by_ip:
                continue
            holder = self.assigned.get(instance, {}).get(ip)
            if holder is not None and holder not in self.deleted:
                continue  # a live pod's, or one the kit never saw answered
            if holder is None and ip in self.daemon[instance]:
                continue  # a warm address
            candidates.add(ip)
            first = self.unknown_since.setdefault(ip, at)
            if holder is not None and self.asked.get(instance, at) <= self.deleted[holder]:
                continue  # a view asked for before the delete cannot show it: wait for one
            if at - first >= self.grace:
                if holder is not None:
                    what = (f"EC2 still gives {instance} {ip}, which the build holds for "
                            f"{holder}, deleted {at - self.deleted[holder]:.1f}s ago")
                    self._open(ip, first + self.grace, node=instance, ip=ip,
                               why="assigned-to-deleted", container=holder, what=what)
                    if self.strict:
                        self.open[ip].severity = VIOLATION
                else:
                    what = (f"EC2 gives {instance} {ip}, which neither the build's datastore "
                            f"nor any pod has had for {at - first:.1f}s")
                    self._open(ip, first + self.grace, node=instance, ip=ip, why="unknown",
                               what=what)
        for ip in [ip for ip in self.unknown_since if ip not in candidates]:
            del self.unknown_since[ip]
            self._close(ip, at)


class EarlyReuse(Checker):
    """Upstream 1091: an address given to a new pod within the required IP cooldown of its
    old pod's delete, and reached there by the old pod's flows.

    A violation when, for a pod X deleted at t (its pod-delete, recorded before the DEL is
    sent: the earliest the build could free the address) and a pod Y added at u with X's IP:
      u - t < cooldown (option `ip_cooldown`, seconds: upstream's IP_COOLDOWN_PERIOD, 30 s,
      times the run's time scale), and the prober's lingering flow to X (its peers keep
      sending to X's old IP, addressed to X, for the cooldown after X's removal) is answered
      by Y (a `stale` event).
    Both halves are needed: a reuse after the cooldown is what the cooldown allows, and stale
    traffic without a reuse reaches nobody. Off when the cooldown is 0."""

    kind = "early-reuse"

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.cooldown = float(self.options.get("ip_cooldown") or 0.0)
        self.ips: dict[str, str] = {}  # pod -> ip (every pod seen)
        self.freed: dict[str, list[tuple[str, float]]] = {}  # ip -> [(deleted pod, at)]
        self.early: dict[str, dict[str, tuple[float, float]]] = {}  # new -> {old: (del, add)}
        self.found: dict[tuple[str, str], Violation] = {}

    def step(self, e: dict, state) -> None:
        if self.cooldown <= 0:
            return
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if e["process"] == "client" and e["type"] == "ok" and f == "pod-add":
            pod, ip = v["pod"], v["ip"]
            self.ips[pod] = ip
            recent = [(old, t) for old, t in self.freed.get(ip, []) if at - t < self.cooldown]
            self.freed[ip] = recent
            if recent:
                self.early[pod] = {old: (t, at) for old, t in recent}
        elif e["process"] == "client" and e["type"] == "ok" and f == "pod-delete":
            pod = v.get("pod")
            ip = v.get("ip") or self.ips.get(pod)
            if pod and ip:
                self.freed.setdefault(ip, []).append((pod, at))
        elif e["process"] == "prober" and f == "stale":
            old, new = v.get("dst"), v.get("by")
            times = self.early.get(new, {}).get(old)
            if times is None or v.get("src") == new:  # a flow needs a peer of the old pod
                return
            deleted, added = times
            found = self.found.get((old, new))
            if found is not None:
                found.detail["stale_answers"] += 1
                return
            ip = v.get("ip") or self.ips.get(new)
            what = (f"traffic for deleted pod {old} reached its successor {new} on IP {ip} "
                    f"{at - deleted:.2f}s after {old}'s delete ({new} got {ip} "
                    f"{added - deleted:.2f}s after it; required cooldown {self.cooldown:.2f}s)")
            self._open(new, at, ip=ip, deleted_pod=old, sent_from=v.get("src"),
                       reassigned_after=round(added - deleted, 3),
                       reached_after=round(at - deleted, 3), cooldown=self.cooldown,
                       stale_answers=1, what=what)
            self.found[(old, new)] = self.open[new]
            self._close(new, at)  # an event, not a state: it stays in the run's violations


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
