"""The EC2 fault family: its target (an API action, a region) and what its two stages hand a kind.

The model itself (duration, the one probability roll, jitter, validation, the registry) is
faultcore's, shared with the fault IMDS. A kind is one class in its own file in this package
(discovered by `cnikit.cloud.faults`), declaring its `stage` and `order`:
- "request" kinds act before a call is served: `apply(call)` returns an Ec2Error to
  answer, or None; it may add to `call.delay` (seconds to wait first). Every matching fault
  fires (delays add up); the first error by order answers.
- "response" kinds act after a call that changed EC2 succeeded: `apply(call)` returns an
  Ec2Error to answer instead of the success (the change stands), or None.
- "describe" kinds change which state DescribeNetworkInterfaces answers from: `age()`, in
  seconds (the gate keeps MAX_LAG_S of history; the largest age that fires wins).
Every fault's `target` names one `action` and one `region` (the region a call is signed
for); a field left out matches all of them. The spec has the fault IMDS's shape:
`{"kind": K, "target": {"action": A, "region": R}, "duration": s, "probability": p, ...}`.
"""

from __future__ import annotations

import random
from typing import Any

from cnikit.cloud.errors import Ec2Error
from faultcore.errors import SpecError
from faultcore.fault import Fault, Kinds, Param, choice, jittered_delay, number, optional

__all__ = [
    "KINDS", "MAX_LAG_S", "TARGET_KEYS", "Call", "Ec2Error", "Ec2Fault", "Param", "choice",
    "jittered_delay", "number", "optional",
]

KINDS = Kinds("EC2 fault kind", ("request", "response", "describe"))
TARGET_KEYS = ("action", "region")
# The gate keeps this much history of its mirror for describe-stage kinds.
MAX_LAG_S = 300.0


class Call:
    """What EC2 fault kinds see of one API call."""

    __slots__ = ("action", "region", "now", "rng", "delay")

    def __init__(self, action: str, now: float, rng: random.Random, region: str | None = None):
        self.action = action
        self.region = region
        self.now = now
        self.rng = rng
        self.delay = 0.0


class Ec2Fault(Fault):
    """An EC2 API fault: its target is one action (`action`, unset: every action) in one
    region (`region`, unset: every region the gate serves)."""

    family = KINDS
    target_fields = ("target",)

    @classmethod
    def from_spec(cls, spec: Any, *args: Any, **kw: Any) -> Ec2Fault:
        if isinstance(spec, dict):
            moved = next((k for k in TARGET_KEYS if k in spec), None)
            if moved is not None:
                # The shape before the fault IMDS's was adopted: say where the field went.
                raise SpecError(f'{moved!r} goes in the target: "target": {{"{moved}": ...}}')
        return super().from_spec(spec, *args, **kw)

    @classmethod
    def parse_target(cls, spec: dict[str, Any], **_: Any) -> tuple[str | None, str | None]:
        raw = spec.get("target")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise SpecError(f"target must be an object, got {type(raw).__name__}")
        for k in raw:
            if k not in TARGET_KEYS:
                raise SpecError(f"unknown target field {k!r} (known: {', '.join(TARGET_KEYS)})")
        action = raw.get("action")
        if action is not None and (not isinstance(action, str) or not action):
            raise SpecError(f"target action must be an EC2 action name such as "
                            f"DescribeNetworkInterfaces, got {action!r}")
        region = raw.get("region")
        if region is not None:
            from cnikit.cloud.regions import known_regions

            if not isinstance(region, str) or region not in known_regions():
                raise SpecError(f"target region must be an AWS region such as us-west-2, "
                                f"got {region!r}")
        return action, region

    @property
    def action(self) -> str | None:
        return self.target[0]

    @property
    def region(self) -> str | None:
        return self.target[1]

    def target_json(self) -> dict[str, Any]:
        return {"target": {k: v for k, v in zip(TARGET_KEYS, self.target, strict=True)
                           if v is not None}}

    def target_matches(self, call: Call) -> bool:
        return ((self.action is None or self.action == call.action)
                and (self.region is None or call.region is None or self.region == call.region))

    # Request and response kinds implement:  apply(self, call) -> Ec2Error | None
    # Describe kinds implement: age(self) -> float (seconds)
