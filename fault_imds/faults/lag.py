from __future__ import annotations

from fault_imds.faults.base import Fault, Param, number, register
from fault_imds.faults.holding import hold


@register
class Lag(Fault):
    """Serve the targeted entries as EC2 was `seconds` ago (every change shows up late)."""

    kind = "lag"
    stage = "content"
    params = {"seconds": Param(number(0, 86400, lo_open=True))}
    description = "serve the targeted entries as EC2 was `seconds` ago"

    def reference_time(self, now: float) -> float:
        return now - self.seconds

    def apply(self, view) -> None:
        t = self.reference_time(view.now)
        hold(view, self.target, view.models_at(t), lambda iid: view.leaves_at(t, iid))
