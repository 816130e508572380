from __future__ import annotations

from fault_imds.faults.base import DROP, Chaos, Drop, ImdsFault


class DropConnection(ImdsFault):
    """Close the connection without answering."""

    kind = "drop"
    stage = "request"
    order = 10  # first: a dropped connection gets nothing else
    uses_probability = True
    targets = ("instance_id", "mac", "eni_id", "path")
    description = "close the connection without answering"
    chaos = Chaos(rank=6, draw=lambda rng: {"probability": round(rng.uniform(0.2, 1.0), 2)})

    async def apply(self, req) -> Drop:
        return DROP
