"""The registry of the EC2 actions the gate models.

A group of actions is one class on `ActionGroup` in its own module of this package; each
of its handlers is a method marked `@action("<EC2 action>")`:

    async def handler(self, r: Region, params: dict[str, str], headers) -> (status, body)

Defining the class registers its actions, and `handlers()` imports every module of the
package first, so a new group is one new file and a new action one new method, its answer's
XML beside it. A handler reads its parameters with cnikit.cloud.query, applies the rules
through the region's mirror (models.Mirror: `plan_*` refuses with EC2's error and changes
nothing), forwards to the upstream what it decided (`self.backend.call`), changes the
mirror with `self.backend.mutate` and records the call in the audit log
(`self.backend.audit`). Anything the gate does not model is forwarded (reads) or forwarded
and resynced (writes) by the HTTP layer.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from typing import Any

from cnikit.cloud.gate.backend import Backend, Region
from faultcore.registry import Registry

Handler = Callable[[Region, dict[str, str], Any], Awaitable[tuple[int, bytes]]]

# EC2 action -> (the group that handles it, the handler's attribute name); an action two
# groups claim is refused, naming both files (faultcore.registry).
_ACTIONS: Registry[tuple[type[ActionGroup], str]] = Registry("modelled EC2 action")


def action(name: str, gate_only: bool = False):
    """Mark a method of an `ActionGroup` as the handler of the EC2 action `name`.
    `gate_only`: the upstream knows nothing of the action (moto answers it a 500), so the
    gate answers its DryRun itself instead of forwarding it."""

    def mark(fn):
        fn.ec2_action = name
        fn.gate_only = gate_only
        return fn

    return mark


class ActionGroup:
    """A group of modelled actions, made once per gate with the gate's backend: its
    handlers work through the backend's public methods (backend.Backend)."""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for attr, fn in vars(cls).items():
            name = getattr(fn, "ec2_action", None)
            if name is not None:
                _ACTIONS.add(name, (cls, attr), cls)

    def __init__(self, backend: Backend):
        self.backend = backend


def discover() -> None:
    """Import every module of the gate package: each group registers itself."""
    pkg = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{__package__}.{info.name}")


def handlers(backend: Backend) -> dict[str, Handler]:
    """Every modelled action's handler, bound to one instance of its group."""
    discover()
    groups: dict[type[ActionGroup], ActionGroup] = {}
    out: dict[str, Handler] = {}
    for name, (cls, attr) in _ACTIONS.items():
        if cls not in groups:
            groups[cls] = cls(backend)
        out[name] = getattr(groups[cls], attr)
    return out
