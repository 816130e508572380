from __future__ import annotations

from cnikit.cloud.faults.base import Call, Chaos, Ec2Fault, Param, jittered_delay, number


class Latency(Ec2Fault):
    """Wait `ms` plus or minus up to `jitter_ms` (uniform, seeded, at least 0: the same
    jitter as the fault IMDS's latency) before the call is served."""

    kind = "latency"
    stage = "request"
    order = 30
    params = {
        "ms": Param(number(0, 600_000), 100.0, help="delay"),
        "jitter_ms": Param(number(0, 600_000), 0.0, help="+- jitter"),
    }
    description = "wait `ms` +- `jitter_ms` before serving the call"
    # The probability first, then the delay: the order random chaos draws them in.
    chaos = Chaos(rank=3, draw=lambda rng: {"probability": round(rng.uniform(0.2, 0.8), 2),
                                            "ms": rng.choice((20, 100, 300))})

    def apply(self, call: Call) -> None:
        call.delay += jittered_delay(self.ms, self.jitter_ms, call.rng)
