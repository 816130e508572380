from __future__ import annotations

from fault_imds.faults.base import Answer, Chaos, ImdsFault, Param, integer


class Error(ImdsFault):
    """Answer with an HTTP error status instead of the entry."""

    kind = "error"
    stage = "request"
    order = 40  # last: a latency fault delays the error too
    uses_probability = True
    targets = ("instance_id", "mac", "eni_id", "path")
    params = {"status": Param(integer(400, 599), 500, help="HTTP status")}
    description = "answer HTTP `status` (default 500) with `probability`"
    chaos = Chaos(rank=4, draw=lambda rng: {"probability": round(rng.uniform(0.2, 1.0), 2)})

    async def apply(self, req) -> Answer:
        return Answer(self.status)
