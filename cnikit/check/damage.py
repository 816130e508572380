"""Damage the nemesis does itself, told apart from damage the build does.

When the nemesis moves an address a pod holds to another interface (`ec2-take-held`, an
operation with a start and an end), that pod is dark and its address is not its node's by
the nemesis's own act: no build can prevent it. The window runs from the operation's start
(recorded before the act) to its end (the address given back) plus `grace`, the time the
fabric and the prober need to see it back. Within it, the violations of the pods that held
the address when the window opened (the victims) are excused when their checker says the
nemesis's act can cause them (`Checker.excusable`: `unreachable`, `ip-not-owned`); what the
build does with the address is not: a second pod given it, or a victim still dark after the
window, stays a violation.

    d = NemesisDamage(grace=3.0)
    d.step(entry, pod_state)             # every history entry, in order
    kept, excused = d.clip(violation)    # kept: the build's part (or None); excused: the rest
"""

from __future__ import annotations

import dataclasses
import math

from cnikit.check.checkers.base import CHECKERS, checker_of

TAKE_HELD = "ec2-take-held"  # the nemesis operation (cnikit.cluster.nemesis.Nemesis.take_held)
EXCUSED = "nemesis-damage"  # the kind an excused violation is reported under (a warning)


def excusable() -> list[str]:
    """The kinds whose checker says the nemesis's own act can cause them (Checker.excusable)."""
    return sorted(kind for kind, c in CHECKERS.items() if c.excusable)


@dataclasses.dataclass
class Window:
    id: str
    ips: list[str]
    pods: set[str]
    start: float
    end: float | None = None

    def until(self, grace: float) -> float:
        return math.inf if self.end is None else self.end + grace


class NemesisDamage:
    def __init__(self, grace: float = 3.0) -> None:
        self.grace = grace
        self.windows: list[Window] = []
        self._open: dict[str, Window] = {}

    def step(self, e: dict, state) -> None:
        if e["process"] != "nemesis" or e["f"] != TAKE_HELD:
            return
        v = e["value"] or {}
        fid = str(v.get("id"))
        if e["type"] == "start":
            ips = list((v.get("target") or {}).get("ips") or [])
            pods = {p for ip in ips for p in state.by_ip.get(ip, ())}
            w = Window(fid, ips, pods, e["time"])
            self.windows.append(w)
            self._open[fid] = w
        elif e["type"] == "end":
            w = self._open.pop(fid, None)
            if w is not None and v.get("by") == "failed":  # nothing was taken
                self.windows.remove(w)
            elif w is not None:
                w.end = e["time"]

    def clip(self, v) -> tuple[object | None, object | None]:
        """(the build's part of violation v or None, the nemesis's part as a warning or None).
        A violation that began before a window, or of a pod the window did not hit, is the
        build's; so is the part of one that outlasts every window it began in."""
        excused = None
        while v is not None:
            active = [w for w in self.windows if w.start <= v.since < w.until(self.grace)]
            victims = {p for w in active for p in w.pods}
            w = next((w for w in active if self._hits(w, v, victims)), None)
            if w is None:
                break
            end = w.until(self.grace)
            if excused is None:
                excused = dataclasses.replace(
                    v, kind=EXCUSED, severity="warning",
                    detail={**v.detail, "excused": v.kind, "nemesis": w.id, "ips": w.ips})
            until = min(v.until if v.until is not None else end, end)
            excused.until = None if until == math.inf else until
            if end == math.inf or (v.until is not None and v.until <= end):
                return None, excused
            # Still broken after the address came back (and the grace): the build's.
            v = dataclasses.replace(v, since=end, detail={**v.detail, "after_nemesis": w.id})
        return v, excused

    @staticmethod
    def _hits(w: Window, v, victims: set[str]) -> bool:
        """v is of a kind the nemesis's act itself causes (Checker.excusable) and about a
        pod the window hit, or one whose failing peers (an `unreachable`'s detail) are all pods
        the windows in effect hit (the other side of their first failing pair, blamed for a
        moment). What the build does with the address (a second pod on it, an early reuse)
        never is."""
        if not checker_of(v.kind).excusable:
            return False
        if v.subject in w.pods:
            return True
        peers = set(v.detail.get("peers") or ())
        return bool(peers & w.pods) and peers <= victims
