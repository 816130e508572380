from __future__ import annotations

from fault_imds.faults.base import Chaos, ImdsFault
from fault_imds.faults.holding import hold


class Stale(ImdsFault):
    """Hold the targeted entries at the values served when the fault began."""

    kind = "stale"
    stage = "content"
    order = 20
    description = "hold the targeted entries at the values served when the fault began"
    chaos = Chaos(rank=1, aim="interface")

    def start(self, engine) -> None:
        self.frozen_models = dict(engine.served_models)
        self.frozen_leaves = {iid: dict(leaves) for iid, leaves in engine.served_leaves.items()}

    def apply(self, view) -> None:
        hold(view, self.target, self.frozen_models, lambda iid: self.frozen_leaves.get(iid, {}))
