from __future__ import annotations

from cnikit.check.checkers.base import WARNING, Checker


class Unprobed(Checker):
    """Each pod must be probed at least once a second (a prober health check: a warning)."""

    kind = "unprobed"
    severity = WARNING
    order = 60

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
