"""What every nemesis action shares, and their registry.

A nemesis action acts on processes or on the account, not on an API's answers: a daemon
killed, restarted, crashed at an EC2 call, every daemon restarted at once, another
principal sweeping, unassigning or detaching. Each is one small class in its own file,
with its attributes (faultcore Params), what it does, the upstream incident it comes from,
and, when random chaos may draw it, its `chaos`. Defining the class registers it; the
gate's `$GATE/nemesis` route, `CniCluster.act`, the fixtures and random chaos read this
registry, so there is no second list to update.
"""

from __future__ import annotations

import ipaddress
import random
from typing import Any, ClassVar

from faultcore.errors import SpecError
from faultcore.fault import Chaos, Param, attributes, checked, integer
from faultcore.registry import Registry


class NemesisActions(Registry):
    """The nemesis's actions by name (faultcore.registry)."""

    def __init__(self):
        super().__init__("nemesis action")

    def describe(self) -> dict[str, dict[str, Any]]:
        """Each action's description, incident and attributes (GET $GATE/nemesis)."""
        return {name: cls.describe() for name, cls in sorted(self.items())}


ACTIONS = NemesisActions()


def node_param(help_: str = "the node (0-based)") -> Param:
    return Param(integer(0, 10_000), help=help_)


def _text(name: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise SpecError(f"{name} must be a non-empty string, got {v!r}")
    return v


def _ipv4(name: str, v: Any) -> str:
    try:
        return str(ipaddress.IPv4Address(v))
    except (ValueError, TypeError):
        raise SpecError(f"{name} must be an IPv4 address, got {v!r}") from None


text = checked(_text, "a non-empty string", str)
ipv4 = checked(_ipv4, "an IPv4 address", str)


class Action:
    """One nemesis action. Subclasses set `name` (which registers them) and `perform`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    why: ClassVar[str] = ""  # the upstream incident it reproduces
    params: ClassVar[dict[str, Param]] = {}
    chaos: ClassVar[Chaos | None] = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("name"):
            ACTIONS.add(cls.name, cls, cls)

    @classmethod
    def parse(cls, spec: dict[str, Any], nodes: int) -> dict[str, Any]:
        """The action's attributes from a JSON spec ({"action": NAME, ...}), checked, with
        defaults; SpecError (one line) on anything unknown, missing or out of range."""
        for k in spec:
            if k != "action" and k not in cls.params:
                raise SpecError(f"unknown field {k!r} for {cls.name} "
                                f"(known: {', '.join(cls.params) or 'none'})")
        attrs = attributes(cls.params, spec, cls.name)
        node = attrs.get("node")
        if node is not None and node >= nodes:
            raise SpecError(f"node must be one of 0..{nodes - 1}, got {node}")
        return attrs

    @classmethod
    def perform(cls, nemesis, nodes: int, **attrs) -> dict[str, Any]:
        """Do it through the nemesis (which records it in the history), on a run of `nodes`
        nodes; a JSON-able result."""
        raise NotImplementedError

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {"description": cls.description, "why": cls.why,
                "params": {name: p.describe() for name, p in cls.params.items()},
                "chaos": cls.chaos is not None}


def parse(spec: Any, nodes: int) -> tuple[type[Action], dict[str, Any]]:
    """The action a JSON spec names and its checked attributes; SpecError (one line)."""
    if not isinstance(spec, dict):
        raise SpecError('a nemesis action must be a JSON object: {"action": ..., ...}')
    cls = ACTIONS.lookup(spec.get("action"))
    return cls, cls.parse(spec, nodes)


def act(nemesis, spec: Any, nodes: int) -> dict[str, Any]:
    """Check and perform one action from its JSON spec; its result. SpecError when the spec
    is bad (nothing was done)."""
    cls, attrs = parse(spec, nodes)
    return cls.perform(nemesis, nodes, **attrs)


def draw(rng: random.Random) -> dict[str, Any]:
    """One drawable action and its attributes, from the seeded generator (random chaos)."""
    cls = rng.choice(ACTIONS.drawable())
    return {"action": cls.name, **cls.chaos.draw(rng)}


class Served:
    """A run's nemesis as the gate's `$GATE/nemesis` serves it (cnikit.cloud.control: the
    gate sits below the cluster and takes this object, it never imports the registry)."""

    def __init__(self, nemesis, nodes: int):
        self.nemesis, self.nodes = nemesis, nodes

    def describe(self) -> dict[str, Any]:
        """Every action described, and the crash points armed (GET)."""
        return {"actions": ACTIONS.describe(), "crash_points": [
            {"id": pid, "node": p.node, "after": p.action, "fired": p.fired}
            for pid, p in list(self.nemesis.crash_points.items())]}

    def check(self, spec: Any) -> None:
        """SpecError (one line) for a spec act would refuse; nothing is done."""
        parse(spec, self.nodes)

    def act(self, spec: Any) -> dict[str, Any]:
        return act(self.nemesis, spec, self.nodes)

