"""IMDS fault kinds: one small class per file in this package, each declaring its stage,
order, params and chaos draw (see base.py). Every module here is imported below, so adding
a kind, or a stage (`KINDS.add_stage`), is adding its file."""

from __future__ import annotations

from typing import Any

from fault_imds.faults.base import (
    DROP,
    KINDS,
    Answer,
    Drop,
    ImdsFault,
    Resolver,
    SpecError,
    Target,
)

KINDS.discover(__name__)

__all__ = [
    "DROP",
    "KINDS",
    "Answer",
    "Drop",
    "ImdsFault",
    "Resolver",
    "SpecError",
    "Target",
    "parse_spec",
]


def parse_spec(spec: Any, resolver: Resolver, fid: str, now: float, wall: float) -> ImdsFault:
    """A validated fault from its JSON spec, or SpecError with a one-line reason."""
    return ImdsFault.from_spec(spec, fid, now, wall, resolver=resolver)
