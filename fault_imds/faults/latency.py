from __future__ import annotations

import asyncio

from fault_imds.faults.base import Fault, Param, number, register


@register
class Latency(Fault):
    """Delay the answer by `ms` plus or minus up to `jitter_ms` (uniform, seeded)."""

    kind = "latency"
    stage = "request"
    uses_probability = True
    targets = ("instance_id", "mac", "eni_id", "path")
    params = {
        "ms": Param(number(0, 600_000, lo_open=True)),
        "jitter_ms": Param(number(0, 600_000), 0.0),
    }
    description = "delay answers by `ms` +- `jitter_ms`"

    async def apply(self, req) -> None:
        delay = self.ms + (
            req.rng.uniform(-self.jitter_ms, self.jitter_ms) if self.jitter_ms else 0
        )
        await asyncio.sleep(max(delay, 0.0) / 1000)
