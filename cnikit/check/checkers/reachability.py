from __future__ import annotations

from cnikit.check.checkers.base import ANCHOR_PREFIX, Checker


class Reachability(Checker):
    """Every pod reachable from every other. Failing pairs are attributed to the fewest pods
    that explain them all (greedy cover), so one lost pod does not blame its peers."""

    kind = "unreachable"
    timed = True  # a probe or a timestamp made late by a stalled machine
    order = 10
    excusable = True  # a pod whose address the nemesis took is dark by its act
    colour, legend = "#3d3d3d", "pod unreachable (went dark)"
    lane_word, outcome_predicate = "lost", "went dark"
    # Blame shorter than one probe round: attribute() blames one side of the first failing
    # pair until the next pair shows which pod is lost.
    MOMENT = 0.1

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.failing: dict[tuple[str, str], str] = {}  # (src, dst) -> the prober's reason

    def step(self, e: dict, state) -> None:
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if e["process"] == "prober" and f in ("fail", "recover"):
            key = (v["src"], v["dst"])
            if key[0] == key[1]:
                return  # a pod paired with itself says nothing of the network
            if f == "fail":
                self.failing[key] = v.get("reason") or "timeout"
            else:
                self.failing.pop(key, None)
        elif e["process"] == "client" and e["type"] == "ok" and f in ("pod-delete",
                                                                        "pod-deleting"):
            pod = v.get("pod")
            self.failing = {k: r for k, r in self.failing.items() if pod not in k}
        else:
            return
        blamed = self.attribute()
        for pod in list(self.open):
            if pod not in blamed:
                self._close(pod, at)
        for pod, peers in blamed.items():
            # Which peers and why (a timeout, or the send's own error): the evidence line
            # must tell a lost pod from one path between two pods that are otherwise fine.
            reasons = sorted({r for k, r in self.failing.items() if pod in k})
            self._open(pod, at, peers=sorted(peers)[:20], failing_pairs=len(peers),
                       reasons=reasons)

    @classmethod
    def momentary(cls, v: dict) -> bool:
        until, since = v.get("until"), v.get("since")
        return until is not None and since is not None and until - since < cls.MOMENT

    @classmethod
    def describe(cls, v: dict, pods: dict[str, dict]) -> dict:
        d = v.get("detail") or {}
        what = f"no answer from {d.get('failing_pairs')} peers"
        if d.get("peers"):
            what += f": {_few(d['peers'], d.get('failing_pairs'))}"
        if d.get("reasons"):
            what += f"; {', '.join(d['reasons'])}"
        return {"pod": v["subject"], "ip": pods.get(v["subject"], {}).get("ip"), "what": what}

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str:
        return f"pod {v.get('subject')} ({ip}) went dark"

    @classmethod
    def sentence(cls, v: dict, say) -> str:
        subject, d = v.get("subject"), v.get("detail") or {}
        if cls.momentary(v):
            return (f"pod {subject} was blamed for a moment at {say.at(v.get('since'))} (one "
                    "side of the first failing pair, until the next pair showed which pod "
                    "was lost)")
        pod = say.pod(subject)
        ip = pod.ip if pod else "?"
        s = f"pod {subject} ({ip}) lost connectivity {say.span}"
        why = say.cause(ip, v.get("since"), pod.start) if pod else None
        peers = d.get("failing_pairs")
        if peers:
            s += f", failing with {peers} peer(s)"
            if not why and d.get("peers"):
                s += f" ({_few(d['peers'], peers)})"
        return s + (f" because {why}" if why else "") + say.root

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


def _few(names: list[str], total: int | None, shown: int = 3) -> str:
    """The first few names, and "..." when there are more than shown."""
    more = ", ..." if (total or len(names)) > min(shown, len(names)) else ""
    return ", ".join(names[:shown]) + more
