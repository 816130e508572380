from __future__ import annotations

from cnikit.check.checkers.base import VIOLATION, WARNING, Checker, canonical_ip
from cnikit.check.checkers.ownership import Ownership


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
    order = 40

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.grace = float(self.options.get("leak_grace", 60.0))
        self.strict = bool(self.options.get("strict_leaks"))
        self.daemon: dict[str, set[str]] = {}  # instance -> ips the daemon knows
        self.assigned: dict[str, dict[str, str]] = {}  # instance -> {ip: container}
        self.asked: dict[str, float] = {}  # instance -> when its view was asked for
        self.deleted: dict[str, float] = {}  # pod (= container id) -> deleted at
        self.unknown_since: dict[str, float] = {}
        # Addresses of ENIs EC2 shows detaching (monitor's loose-enis): still the node's in
        # EC2, but on their way out with their ENI, which the build already let go.
        self.leaving: set[str] = set()

    def step(self, e: dict, state) -> None:
        ownership = state.checker(Ownership.kind)
        f, v, at, proc = e["f"], e["value"] or {}, e["time"], e["process"]
        if proc == "monitor" and f == "daemon-view":
            self.daemon[v["instance_id"]] = {canonical_ip(ip) for ip in v.get("ips", [])}
            self.assigned[v["instance_id"]] = {canonical_ip(ip): c for ip, c in
                                               (v.get("assigned") or {}).items()}
            self.asked[v["instance_id"]] = float(v.get("at") or at)
        elif proc == "monitor" and f == "daemon-view-error":
            # The build's view is unknown while its daemon is down: judge nothing there.
            self.daemon.pop(v.get("instance_id"), None)
            self.assigned.pop(v.get("instance_id"), None)
        elif proc == "monitor" and f == "loose-enis":
            self.leaving = {ip for info in (v.get("detaching") or {}).values()
                            for ip in info.get("ips") or ()}
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
            if instance not in self.daemon or primary or ip in state.by_ip or ip in self.leaving:
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
