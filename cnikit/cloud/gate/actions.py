"""The registry of the EC2 actions the gate models.

A group of actions is one class on `Actions` in its own module of this package; each of its
handlers is a method marked `@action("<EC2 action>")`:

    async def handler(self, r: Region, params: dict[str, str], headers) -> (status, body)

Defining the class registers its actions, and `handlers()` imports every module of the
package first, so a new group is one new file and a new action one new method. A handler
applies the rules through the region's mirror (models.Mirror: `plan_*` refuses with EC2's
error and changes nothing), forwards to the upstream what it decided, changes the mirror
with `_mutate` and records the call in the audit log. Anything the gate does not model is
forwarded (reads) or forwarded and resynced (writes) by the HTTP layer.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from typing import Any

from cnikit.cloud.gate.backend import Backend, Region
from faultcore.registry import Registry

Handler = Callable[[Region, dict[str, str], Any], Awaitable[tuple[int, bytes]]]

# EC2 action -> (the group that handles it, the handler's attribute name); an action two
# groups claim is refused, naming both files (faultcore.registry).
_ACTIONS: Registry[tuple[type[Actions], str]] = Registry("modelled EC2 action")


def action(name: str):
    """Mark a method of an `Actions` group as the handler of the EC2 action `name`."""

    def mark(fn):
        fn.ec2_action = name
        return fn

    return mark


class Actions:
    """A group of modelled actions, made once per gate. Its handlers reach the gate's
    backend under the backend's own names (`_lock`, `_call`, `_forward`, `_mutate`, ...)."""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for attr, fn in vars(cls).items():
            name = getattr(fn, "ec2_action", None)
            if name is not None:
                _ACTIONS.add(name, (cls, attr), cls)

    def __init__(self, backend: Backend):
        self.backend = backend
        self.audit = backend.audit
        self.faults = backend.faults
        self._forward = backend._forward
        self._call = backend._call
        self._mutate = backend._mutate
        self._resync = backend._resync
        self._ensure_limits = backend._ensure_limits
        self._enis_as_of = backend._enis_as_of
        self._addresses_as_of = backend._addresses_as_of

    async def _eni_with_limits(self, r: Region, eni_id: str | None):
        """The ENI (EC2's not-found when unknown), its instance type's limits known to the
        mirror first: the address rules judge against them."""
        eni = r.mirror.eni(eni_id)
        if eni.attachment:
            inst = r.mirror.instances.get(eni.attachment.instance_id)
            if inst:
                await self._ensure_limits(inst.instance_type)
        return eni

    @property
    def _lock(self) -> asyncio.Lock:
        """Serialises every mutating call (made on the event loop when the gate starts)."""
        return self.backend._lock


def discover() -> None:
    """Import every module of the gate package: each group registers itself."""
    pkg = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{__package__}.{info.name}")


def handlers(backend: Backend) -> dict[str, Handler]:
    """Every modelled action's handler, bound to one instance of its group."""
    discover()
    groups: dict[type[Actions], Actions] = {}
    out: dict[str, Handler] = {}
    for name, (cls, attr) in _ACTIONS.items():
        if cls not in groups:
            groups[cls] = cls(backend)
        out[name] = getattr(groups[cls], attr)
    return out
