"""Fault stages: the hook points a fault server calls, and how the faults firing there combine.

A stage is registered once with its family (`Kinds.add_stage`): its `name` (what a kind's
`stage` says), the server's `hook` it runs at, its `order` among the stages of that hook,
and `run(faults, point)`, which applies the stage's firing faults (in order: by kind order,
then creation) to what the hook point hands it and combines their results there. A server
calls each hook point from one place, which runs every stage registered at it; adding a
stage at an existing hook point is its registration alone, no server edit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Stage:
    """One stage of a fault family. Subclasses implement `run`."""

    def __init__(self, name: str, hook: str = "", order: float = 0, description: str = ""):
        self.name = name
        self.hook = hook or name  # the server's hook point this stage runs at
        self.order = order  # among the stages of one hook, lower first
        self.description = description

    def run(self, faults: Iterable[Any], point: Any) -> Any:
        """Apply `faults` (the stage's faults that fire, in order; possibly a lazy iterable:
        a stage that stops early leaves the later ones unrolled) to `point`, what the hook
        hands the stage, and combine their results. What is returned, and what `point`
        carries, is the hook's contract (see the family's base module)."""
        raise NotImplementedError(f"stage {self.name!r} does not run")

    def describe(self) -> dict[str, Any]:
        return {"hook": self.hook, "order": self.order, "description": self.description}

    def __repr__(self) -> str:
        return f"<stage {self.name} at {self.hook}>"
