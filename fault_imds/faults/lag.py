from __future__ import annotations

from fault_imds.faults.base import Chaos, ImdsFault, Param, number
from fault_imds.faults.holding import hold


class Lag(ImdsFault):
    """Serve the targeted entries as EC2 was `seconds` ago (every change shows up late)."""

    kind = "lag"
    stage = "content"
    order = 10  # first: later content faults edit what EC2 showed `seconds` ago
    params = {"seconds": Param(number(0, 86400, lo_open=True), help="how far behind")}
    description = "serve the targeted entries as EC2 was `seconds` ago"
    chaos = Chaos(rank=3, aim="interface",
                  draw=lambda rng: {"seconds": round(rng.uniform(0.5, 4.0), 2)})

    def reference_time(self, now: float) -> float:
        return now - self.seconds

    def apply(self, view) -> None:
        t = self.reference_time(view.now)
        hold(view, self.target, view.models_at(t), lambda iid: view.leaves_at(t, iid))
