"""Fault kinds, one small class per file, registered by name (see base.py)."""

from __future__ import annotations

from typing import Any

from fault_imds.faults import drop, error, lag, latency, missing, stale, token  # noqa: F401
from fault_imds.faults.base import (
    DROP,
    REGISTRY,
    REQUIRED,
    Answer,
    Drop,
    Fault,
    Resolver,
    SpecError,
    Target,
    number,
    parse_target,
)

# Composition order, documented in fault_imds/engine.py.
CONTENT_ORDER = ("lag", "stale", "missing")
REQUEST_ORDER = ("drop", "token", "latency", "error")

COMMON = ("kind", "target", "duration", "probability")

__all__ = [
    "CONTENT_ORDER",
    "DROP",
    "REGISTRY",
    "REQUEST_ORDER",
    "Answer",
    "Drop",
    "Fault",
    "Resolver",
    "SpecError",
    "Target",
    "parse_spec",
]


def parse_spec(spec: Any, resolver: Resolver, fid: str, now: float, wall: float) -> Fault:
    """A validated Fault from its JSON spec, or SpecError with a one-line reason."""
    if not isinstance(spec, dict):
        raise SpecError("a fault spec must be a JSON object")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in REGISTRY:
        raise SpecError(f"unknown fault kind {kind!r} (known: {', '.join(sorted(REGISTRY))})")
    cls = REGISTRY[kind]
    for k in spec:
        if k not in COMMON and k not in cls.params:
            known = ", ".join([*COMMON[1:], *cls.params])
            raise SpecError(f"unknown field {k!r} for {kind} (known: {known})")
    duration = spec.get("duration")
    if duration is not None:
        duration = number(0, None, lo_open=True)("duration", duration)
    probability = 1.0
    if "probability" in spec:
        probability = number(0, 1)("probability", spec["probability"])
        if not cls.uses_probability and probability != 1.0:
            # What is served is one view at a time (and in the event log): no coin flips.
            raise SpecError(f"probability does not apply to {kind} (only 1 is accepted)")
    attrs: dict[str, Any] = {}
    for name, param in cls.params.items():
        if name in spec:
            attrs[name] = param.check(name, spec[name])
        elif param.default is REQUIRED:
            raise SpecError(f"{kind} needs {name!r}")
        else:
            attrs[name] = param.default
    target = parse_target(spec.get("target"), resolver, cls.targets)
    return cls(fid, target, duration, probability, attrs, now, wall)
