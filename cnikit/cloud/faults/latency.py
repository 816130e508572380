from __future__ import annotations

from cnikit.cloud.faults.base import Call, Ec2Fault, Param, jittered_delay, number


class Latency(Ec2Fault):
    """Wait `ms` plus or minus up to `jitter_ms` (uniform, seeded, at least 0: the same
    jitter as the fault IMDS's latency) before the call is served."""

    kind = "latency"
    stage = "request"
    order = 30
    params = {
        "ms": Param(number(0, 600_000), 100.0),
        "jitter_ms": Param(number(0, 600_000), 0.0),
    }
    description = "wait `ms` +- `jitter_ms` before serving the call"

    def apply(self, call: Call) -> None:
        call.delay += jittered_delay(self.ms, self.jitter_ms, call.rng)
