"""The EC2 fault family: its target (an API action) and what its two stages hand a kind.

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
Every fault targets one `action` and one `region` (the region a call is signed for; None
for either: all of them).
"""

from __future__ import annotations

import random
from typing import Any

from cnikit.cloud.errors import Ec2Error
from faultcore.errors import SpecError
from faultcore.fault import Fault, Kinds, Param, choice, jittered_delay, number, optional

__all__ = [
    "KINDS", "MAX_LAG_S", "Call", "Ec2Error", "Ec2Fault", "Param", "choice", "jittered_delay",
    "number", "optional",
]

KINDS = Kinds("EC2 fault kind", ("request", "response", "describe"))
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
    """An EC2 API fault: targets one action (`action`, None: every action) in one region
    (`region`, None: every region the gate serves)."""

    family = KINDS
    target_fields = ("action", "region")

    @classmethod
    def parse_target(cls, spec: dict[str, Any], **_: Any) -> tuple[str | None, str | None]:
        action = spec.get("action")
        if action is not None and (not isinstance(action, str) or not action):
            raise SpecError(f"action must be an EC2 action name such as "
                            f"DescribeNetworkInterfaces, got {action!r}")
        region = spec.get("region")
        if region is not None:
            from cnikit.cloud.regions import known_regions

            if not isinstance(region, str) or region not in known_regions():
                raise SpecError(f"region must be an AWS region such as us-west-2, "
                                f"got {region!r}")
        return action, region

    @property
    def action(self) -> str | None:
        return self.target[0]

    @property
    def region(self) -> str | None:
        return self.target[1]

    def target_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.region is not None:
            out["region"] = self.region
        return out

    def target_matches(self, call: Call) -> bool:
        return ((self.action is None or self.action == call.action)
                and (self.region is None or call.region is None or self.region == call.region))

    # Request and response kinds implement:  apply(self, call) -> Ec2Error | None
    # Describe kinds implement: age(self) -> float (seconds)
