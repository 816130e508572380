"""The invariants of a run: every checker, fed live from the history or replayed from one.

    inv = Invariants(leak_grace=60)
    history.subscribe(inv.step)        # continuous
    inv.active() / inv.violations() / inv.warnings() / inv.failing_pods()
    judge(entries) -> Invariants       # the same checkers over a saved history
"""

from __future__ import annotations

import threading

from cnikit.check.checkers import (
    VIOLATION,
    WARNING,
    Leaks,
    Ownership,
    PodState,
    Reachability,
    SharedIp,
    Unprobed,
    Violation,
)


class Invariants:
    def __init__(self, leak_grace: float = 60.0):
        self.state = PodState()
        self.reachability = Reachability()
        self.shared_ip = SharedIp()
        self.ownership = Ownership()
        self.leaks = Leaks(leak_grace)
        self.unprobed = Unprobed()
        self.checkers = [self.reachability, self.shared_ip, self.ownership, self.leaks,
                         self.unprobed]
        self._lock = threading.RLock()

    def step(self, entry: dict) -> None:
        with self._lock:
            self.state.step(entry)
            self.reachability.step(entry, self.state)
            self.shared_ip.step(entry, self.state)
            self.ownership.step(entry, self.state)
            self.leaks.step(entry, self.state, self.ownership)
            self.unprobed.step(entry, self.state)

    def _collect(self, severity: str | None, kind: str | None, active_only: bool) -> list[Violation]:
        with self._lock:
            out = []
            for c in self.checkers:
                items = list(c.open.values()) if active_only else c.all()
                out += [v for v in items if (severity is None or v.severity == severity)
                        and (kind is None or v.kind == kind)]
            return sorted(out, key=lambda v: v.since)

    def active(self, kind: str | None = None, severity: str | None = VIOLATION) -> list[Violation]:
        """Violations holding right now."""
        return self._collect(severity, kind, True)

    def violations(self, kind: str | None = None) -> list[Violation]:
        """Every violation of the run, past and present."""
        return self._collect(VIOLATION, kind, False)

    def warnings(self, kind: str | None = None) -> list[Violation]:
        return self._collect(WARNING, kind, False)

    def failing_pods(self) -> set[str]:
        with self._lock:
            return set(self.reachability.open)

    def ok(self) -> bool:
        return not self.violations()

    def summary(self) -> dict:
        return {"ok": self.ok(),
                "violations": [v.to_json() for v in self.violations()],
                "warnings": [v.to_json() for v in self.warnings()]}


def judge(entries: list[dict], leak_grace: float = 60.0) -> Invariants:
    inv = Invariants(leak_grace)
    for e in entries:
        inv.step(e)
    return inv
