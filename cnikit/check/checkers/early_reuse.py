from __future__ import annotations

from cnikit.check.checkers.base import Checker, Violation, canonical_ip

# A reuse with less of the cooldown left than this may go unseen on a quiet machine too (a
# probe round is 0.1 s): only a reuse with more left and no stale answer says "too slow".
# Scenarios that stage the race ask for this much left too (cnikit.scenarios.common).
MIN_LEFT_S = 0.3


class EarlyReuse(Checker):
    """Upstream 1091: an address given to a new pod within the required IP cooldown of its
    old pod's delete, and reached there by the old pod's flows.

    A violation when, for a pod X deleted at t (its pod-delete, recorded before the DEL is
    sent, or the pod-deleting of a retried DEL that succeeded: the earliest the build could
    free the address) and a pod Y added at u with X's IP:
      u - t < cooldown (option `ip_cooldown`, seconds: upstream's IP_COOLDOWN_PERIOD, 30 s,
      times the run's time scale), and the prober's lingering flow to X (its peers keep
      sending to X's old IP, addressed to X, for the cooldown after X's removal) is answered
      by Y (a `stale` event).
    Both halves are needed: a reuse after the cooldown is what the cooldown allows, and stale
    traffic without a reuse reaches nobody. Off when the cooldown is 0.

    A reuse inside the cooldown whose old flows never reached the new pod, with time left
    for them to (MIN_LEFT_S), is the bug with its proof missing: the prober was held off the
    CPU. The run cannot say it holds: `unjudged` names it (cnikit.check.stall)."""

    kind = "early-reuse"
    timed = True  # a probe or a timestamp made late by a stalled machine
    order = 50

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.cooldown = float(self.options.get("ip_cooldown") or 0.0)
        self.ips: dict[str, str] = {}  # pod -> ip (every pod seen)
        self.freed: dict[str, list[tuple[str, float]]] = {}  # ip -> [(deleted pod, at)]
        self.early: dict[str, dict[str, tuple[float, float]]] = {}  # new -> {old: (del, add)}
        self.found: dict[tuple[str, str], Violation] = {}
        self.deleting: dict[str, float] = {}  # pod -> when its retried DEL was sent
        self.last = 0.0  # the latest entry's time: how far the history has come

    def step(self, e: dict, state) -> None:
        if self.cooldown <= 0:
            return
        f, v, at = e["f"], e["value"] or {}, e["time"]
        self.last = max(self.last, at)
        if e["process"] == "client" and e["type"] == "ok" and f == "pod-add":
            pod, ip = v["pod"], canonical_ip(v["ip"])
            self.ips[pod] = ip
            recent = [(old, t) for old, t in self.freed.get(ip, []) if at - t < self.cooldown]
            self.freed[ip] = recent
            if recent:
                self.early[pod] = {old: (t, at) for old, t in recent}
        elif e["process"] == "client" and e["type"] == "ok" and f == "pod-deleting":
            self.deleting[v.get("pod")] = at  # a retried DEL sent before the pod-delete
        elif e["process"] == "client" and e["type"] == "ok" and f == "pod-kept":
            self.deleting.pop(v.get("pod"), None)
        elif e["process"] == "client" and e["type"] == "ok" and f == "pod-delete":
            pod = v.get("pod")
            ip = canonical_ip(v.get("ip")) or self.ips.get(pod)
            at = self.deleting.pop(pod, at)
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

    def unjudged(self) -> list[str]:
        """Reuses inside the cooldown, with MIN_LEFT_S of it left and the cooldown over by
        the history's end, that no flow of the old pod reached: the prober missed them."""
        out = []
        for new, olds in self.early.items():
            for old, (deleted, added) in olds.items():
                left = deleted + self.cooldown - added
                if (old, new) in self.found or left < MIN_LEFT_S:
                    continue
                if self.last >= deleted + self.cooldown:
                    out.append(f"{new} got deleted pod {old}'s IP {added - deleted:.2f}s after "
                               f"its delete (cooldown {self.cooldown:.2f}s) and no flow of "
                               f"{old}'s reached it in the {left:.2f}s left: the prober was "
                               f"held off the CPU")
        return out
