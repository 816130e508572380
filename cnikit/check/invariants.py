"""The invariants of a run: every checker, fed live from the history or replayed from one.

    inv = Invariants(leak_grace=60, ip_cooldown=1.5, strict_leaks=False)
    history.subscribe(inv.step)        # continuous
    inv.active() / inv.violations() / inv.warnings() / inv.failing_pods()
    judge(entries) -> Invariants       # the same checkers over a saved history
"""

from __future__ import annotations

import threading
import traceback

from cnikit.check.checkers import (
    VIOLATION,
    WARNING,
    PodState,
    Violation,
    in_order,
)
from cnikit.check.damage import NemesisDamage

CHECKER_ERROR = "checker-error"


class Invariants:
    """Every registered checker (a module of cnikit.check.checkers each) over one history."""

    def __init__(self, leak_grace: float = 60.0, damage_grace: float = 3.0,
                 ip_cooldown: float = 0.0, strict_leaks: bool = False):
        """leak_grace: seconds before an address held for no pod is a leak; ip_cooldown:
        the required IP cooldown in run seconds (0: early reuse not judged); strict_leaks:
        a leak is a violation (certification), not a warning."""
        self.state = PodState()
        # What the nemesis broke itself (an address it took from a pod) is not the build's.
        self.damage = NemesisDamage(damage_grace)
        options = {"leak_grace": leak_grace, "ip_cooldown": ip_cooldown,
                   "strict_leaks": strict_leaks}
        self.checkers = {kind: cls(options) for kind, cls in in_order()}
        # A checker that raised: recorded once as a violation of its own and no longer fed.
        # The history is appended from the prober's and the scenario's threads: a checker's
        # bug must fail the run visibly, never raise in those threads.
        self.errors: list[Violation] = []
        self._broken: set[str] = set()
        self._lock = threading.RLock()

    # What a checker's step sees as `run`.
    @property
    def pods(self) -> dict[str, dict]:
        return self.state.pods

    @property
    def by_ip(self) -> dict[str, set[str]]:
        return self.state.by_ip

    def checker(self, kind: str):
        return self.checkers.get(kind)

    def step(self, entry: dict) -> None:
        with self._lock:
            self.state.step(entry)
            self.damage.step(entry, self.state)
            for kind, c in self.checkers.items():
                if kind in self._broken:
                    continue
                try:
                    c.step(entry, self)
                except Exception as e:  # noqa: BLE001 - see self.errors
                    self._broken.add(kind)
                    self.errors.append(Violation(
                        CHECKER_ERROR, kind, entry.get("time", 0.0), None, VIOLATION,
                        {"error": f"{type(e).__name__}: {e}", "entry": entry.get("index"),
                         "traceback": traceback.format_exc(limit=6)[-2000:]}))

    def _collect(self, severity: str | None, kind: str | None, active_only: bool) -> list[Violation]:
        with self._lock:
            found = list(self.errors)
            for c in self.checkers.values():
                found += list(c.open.values()) if active_only else c.all()
            out = []
            for v in found:
                kept, excused = self.damage.clip(v)
                out += [x for x in (kept, excused) if x is not None
                        and (severity is None or x.severity == severity)
                        and (kind is None or x.kind == kind)]
            return sorted(out, key=lambda v: v.since)

    def active(self, kind: str | None = None, severity: str | None = VIOLATION) -> list[Violation]:
        """Violations holding right now."""
        return self._collect(severity, kind, True)

    def violations(self, kind: str | None = None) -> list[Violation]:
        """Every violation of the run, past and present."""
        return self._collect(VIOLATION, kind, False)

    def warnings(self, kind: str | None = None) -> list[Violation]:
        return self._collect(WARNING, kind, False)

    def unjudged(self) -> list[str]:
        """Every checker's cases it could not judge on this machine (Checker.unjudged)."""
        with self._lock:
            return [why for kind, c in self.checkers.items() if kind not in self._broken
                    for why in c.unjudged()]

    def failing_pods(self) -> set[str]:
        with self._lock:
            return set(self.checkers["unreachable"].open)

    def ok(self) -> bool:
        return not self.violations()

    def summary(self) -> dict:
        return {"ok": self.ok(),
                "violations": [v.to_json() for v in self.violations()],
                "warnings": [v.to_json() for v in self.warnings()]}


def judge(entries: list[dict], leak_grace: float = 60.0, ip_cooldown: float = 0.0,
          strict_leaks: bool = False) -> Invariants:
    inv = Invariants(leak_grace, ip_cooldown=ip_cooldown, strict_leaks=strict_leaks)
    for e in entries:
        inv.step(e)
    return inv
