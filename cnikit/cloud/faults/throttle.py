from __future__ import annotations

from cnikit.cloud.faults.base import Call, Chaos, Ec2Error, Ec2Fault, Param, number, optional


class Throttle(Ec2Fault):
    """`RequestLimitExceeded` (503). With `rate` (requests per second, `burst` defaulting to
    the rate), a token bucket per action: calls beyond the rate are throttled (then
    `probability` applies to those); without `rate`, every call is a candidate."""

    kind = "throttle"
    stage = "request"
    order = 10  # first: a throttled call is refused before it could fail otherwise
    params = {
        "rate": Param(optional(number(0, None, lo_open=True)), None, help="calls per second"),
        "burst": Param(optional(number(0, None, lo_open=True)), None,
                       help="bucket size (default: the rate)"),
    }
    description = "RequestLimitExceeded (503), beyond `rate` calls/s (`burst`) when given"
    chaos = Chaos(rank=1, draw=lambda rng: {"probability": round(rng.uniform(0.2, 0.8), 2)})

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._buckets: dict[str, tuple[float, float]] = {}

    def applies(self, call: Call) -> bool:
        if self.rate is None:
            return True
        cap = self.burst or self.rate
        tokens, last = self._buckets.get(call.action, (cap, call.now))
        tokens = min(cap, tokens + (call.now - last) * self.rate)
        if tokens >= 1:
            self._buckets[call.action] = (tokens - 1, call.now)
            return False
        self._buckets[call.action] = (tokens, call.now)
        return True

    def apply(self, call: Call) -> Ec2Error:
        return Ec2Error("RequestLimitExceeded", "Request limit exceeded.", status=503)
