"""The EC2 fault family: its target (an API action, a region), its stages, and what each
stage hands a kind.

The model itself (duration, the one probability roll, jitter, validation, the registry) is
faultcore's, shared with the fault IMDS. A kind is one class in its own file in this package
(discovered by `cnikit.cloud.faults`), declaring its `stage` and `order`, its `params`
(check, default, help: the control API and GET /_cnikit/kinds read them) and, when random
chaos may draw it, its `chaos`.

Stages are registered here (`KINDS.add_stage`); a new one is one more registration, in this
file or in a module of its own in this package. The gate calls four hook points, each from
one place (`FaultSet.before_call`, `on_response`, `transition_s`, `describe_view`), and each
runs every stage registered at it on one `Call`, which carries what the hook lets a stage
change:
- hook "before" (before a call is served): `call.delay` (seconds to wait first, they add
  up), `call.error` (an Ec2Error to answer instead; the first set wins), `call.params`
  (the call's parameters). The "request" stage: `apply(call)` returns an Ec2Error to answer,
  or None; it may add to `call.delay`. Every matching fault fires; the first error by order
  answers.
- hook "after" (after a call that changed EC2 succeeded): `call.error`, answered instead of
  the success (the change stands). The "response" stage: `apply(call)` returns an Ec2Error,
  or None; the first one answers.
- hook "transition" (an Attach or Detach that succeeded, before its answer): `call.settle`,
  in seconds: how long EC2 shows the attachment "attaching"/"detaching" before it is
  "attached"/gone (cnikit.cloud.gate.transition_stage). The "transition" stage: kinds'
  `settle_s(call)`, the largest that fires wins.
- hook "describe" (which state DescribeNetworkInterfaces answers from): `call.lag`, in
  seconds (the gate keeps MAX_LAG_S of history). The "describe" stage: kinds' `age()`, the
  largest that fires wins. `call.addresses`: (seconds, since) per firing fault of the
  "addresses" stage (addresses_lag.py): each ENI's address list is shown as of the largest
  `seconds` whose `since` (None: any ENI) its attachment is not older than.
Every fault's `target` names one `action` and one `region` (the region a call is signed
for); a field left out matches all of them. The spec has the fault IMDS's shape:
`{"kind": K, "target": {"action": A, "region": R}, "duration": s, "probability": p, ...}`.
"""

from __future__ import annotations

import random
from typing import Any

from cnikit.cloud.ec2_actions import known_actions
from cnikit.cloud.errors import Ec2Error
from faultcore.errors import SpecError
from faultcore.fault import (
    Chaos,
    Fault,
    Kinds,
    Param,
    choice,
    integer,
    jittered_delay,
    number,
    optional,
)
from faultcore.stage import Stage
from faultcore.suggest import did_you_mean

__all__ = [
    "AFTER", "BEFORE", "DESCRIBE", "KINDS", "TRANSITION", "MAX_LAG_S", "TARGET_KEYS", "Call", "Chaos",
    "Ec2Error", "Ec2Fault", "Param", "Stage", "choice", "integer", "jittered_delay", "number",
    "optional",
]

TARGET_KEYS = ("action", "region")
# The gate keeps this much history of its mirror for describe-stage kinds.
MAX_LAG_S = 300.0


class Call:
    """What EC2 fault kinds see of one API call, and what the stages of its hook point
    decide (see the module docstring)."""

    __slots__ = ("action", "region", "now", "rng", "delay", "params", "error", "lag",
                 "addresses", "settle")

    def __init__(self, action: str, now: float, rng: random.Random, region: str | None = None,
                 params: dict[str, str] | None = None):
        self.action = action
        self.region = region
        self.now = now
        self.rng = rng
        self.params = params
        self.delay = 0.0
        self.error: Ec2Error | None = None
        self.lag = 0.0
        self.addresses: list[tuple[float, float | None]] = []
        self.settle = 0.0


# The gate's hook points (see the module docstring).
BEFORE, AFTER, DESCRIBE, TRANSITION = "before", "after", "describe", "transition"


class RequestStage(Stage):
    """Every firing fault acts (delays add up); the first error by order answers."""

    def run(self, faults, call: Call) -> None:
        for f in faults:
            out = f.apply(call)
            if call.error is None:
                call.error = out


class ResponseStage(Stage):
    """The first firing fault that answers an error replaces the success."""

    def run(self, faults, call: Call) -> None:
        if call.error is None:
            call.error = next((e for f in faults if (e := f.apply(call)) is not None), None)


class DescribeStage(Stage):
    """DescribeNetworkInterfaces answers from the largest age that fires."""

    def run(self, faults, call: Call) -> None:
        call.lag = max([call.lag, *(f.age() for f in faults)])


class TransitionStage(Stage):
    """An attach or detach takes the longest time a firing fault gives it."""

    def run(self, faults, call: Call) -> None:
        call.settle = max([call.settle, *(f.settle_s(call) for f in faults)])


KINDS = Kinds("EC2 fault kind")
KINDS.add_stage(RequestStage("request", hook=BEFORE,
                             description="before a call is served: an error or a delay"))
KINDS.add_stage(ResponseStage("response", hook=AFTER,
                              description="after a change took effect: an error answered"))
KINDS.add_stage(DescribeStage("describe", hook=DESCRIBE,
                              description="the age of the state DescribeNetworkInterfaces shows"))
KINDS.add_stage(TransitionStage("transition", hook=TRANSITION,
                                description="how long an attach or detach takes to complete"))


def _check_action(action: Any) -> None:
    """A target's action must be one EC2 has: a misspelt one would match no call, and the
    fault would never fire while the run looked faulted."""
    if not isinstance(action, str) or not action:
        raise SpecError(f"target action must be an EC2 action name such as "
                        f"DescribeNetworkInterfaces, got {action!r}")
    if action not in known_actions():
        raise SpecError(f"target action {action!r} is not an EC2 action"
                        f"{did_you_mean(action, known_actions())}")


class Ec2Fault(Fault):
    """An EC2 API fault: its target is one action (`action`, unset: every action) in one
    region (`region`, unset: every region the gate serves)."""

    family = KINDS
    target_fields = ("target",)
    # The actions a kind can answer at all (None: any): a target naming another is refused,
    # since the fault would never fire while the run looked faulted.
    only_actions: tuple[str, ...] | None = None

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
        if action is not None:
            _check_action(action)
            if cls.only_actions is not None and action not in cls.only_actions:
                raise SpecError(f"kind {cls.kind!r} answers only {', '.join(cls.only_actions)}, "
                                f"not {action}")
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
                and (self.only_actions is None or call.action in self.only_actions)
                and (self.region is None or call.region is None or self.region == call.region))

    # Request and response kinds implement:  apply(self, call) -> Ec2Error | None
    # Describe kinds implement: age(self) -> float (seconds)
    # Transition kinds implement: settle_s(self, call) -> float (seconds)
