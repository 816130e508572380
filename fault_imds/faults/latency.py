from __future__ import annotations

import asyncio

from fault_imds.faults.base import Chaos, ImdsFault, Param, number
from faultcore.fault import jittered_delay


class Latency(ImdsFault):
    """Delay the answer by `ms` plus or minus up to `jitter_ms` (uniform, seeded, at least 0:
    faultcore.fault.jittered_delay, as the EC2 gate's latency)."""

    kind = "latency"
    stage = "request"
    order = 30
    uses_probability = True
    targets = ("instance_id", "mac", "eni_id", "path")
    params = {
        "ms": Param(number(0, 600_000, lo_open=True), help="delay"),
        "jitter_ms": Param(number(0, 600_000), 0.0, help="+- jitter"),
    }
    description = "delay answers by `ms` +- `jitter_ms`"
    chaos = Chaos(rank=5, draw=lambda rng: {"ms": rng.choice((20, 100, 400))})

    async def apply(self, req) -> None:
        await asyncio.sleep(jittered_delay(self.ms, self.jitter_ms, req.rng))
