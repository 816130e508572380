"""The scenario registry (faultcore.registry): `@scenario(...)` registers a function under
its name (cnikit.scenarios lists and runs them); a name two files use is refused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from faultcore.registry import Registry

if TYPE_CHECKING:
    from cnikit.scenarios.engine.ctx import Ctx


@dataclass(frozen=True)
class Subnets:
    """A scenario's subnets: `node_tags` on the nodes' subnet, and `others`, more subnets of
    their AZ as (CIDR, tags) (CniCluster's subnet_tags and subnets)."""

    node_tags: dict[str, str] = field(default_factory=dict)
    others: tuple[tuple[str, dict[str, str]], ...] = ()

    def to_json(self) -> dict:
        return {"node_tags": dict(self.node_tags),
                "others": [{"cidr": c, "tags": dict(t)} for c, t in self.others]}


@dataclass
class Scenario:
    name: str
    description: str
    fn: Callable[[Ctx], None]
    why: str = ""
    nodes: int = 2
    env: dict[str, str] = field(default_factory=dict)
    duration: float | None = None  # default --duration (seconds of chaos), if it takes one
    instance_type: str = "m5.large"  # every node's: its ENI and address limits
    # The pods' address family: "ipv4", or "ipv6" (a dual-stack VPC, the build in its IPv6
    # mode: upstream's ENABLE_IPv6). Run only against builds of that family.
    family: str = "ipv4"
    # An ipv4 scenario in a dual-stack VPC: the nodes' ENIs hold IPv6 addresses too, and the
    # build stays in its IPv4 mode (upstream #3156's nodes).
    dual_stack: bool = False
    # One instance type per node, in node order (a run mixing types); empty: every node
    # is an `instance_type`.
    instance_types: tuple[str, ...] = ()
    # The subnets subnet discovery (`kubernetes.io/role/cni`) chooses from: the nodes'
    # subnet's tags and other subnets of their AZ (None: one untagged subnet).
    subnets: Subnets | None = None

    @property
    def vpc_family(self) -> str:
        """The CniCluster's ip_family for this scenario."""
        return "dual" if self.dual_stack and self.family == "ipv4" else self.family

    @property
    def expected(self) -> dict[str, str | None]:
        """Built-in target -> its expected verdict (the profiles declare them)."""
        from cnikit.daemon import profiles

        return {p.name: p.expected_verdict(self.name) for p in profiles.registry().values()}


REGISTRY: Registry[Scenario] = Registry("scenario")


def scenario(name: str, description: str, why: str = "", nodes: int = 2,
             env: dict[str, str] | None = None, duration: float | None = None,
             instance_type: str = "m5.large", family: str = "ipv4", dual_stack: bool = False,
             instance_types: tuple[str, ...] = (), subnets: Subnets | None = None):
    """Register fn(ctx) as a named scenario (one line of description; why each profile
    reaches the verdict its profile module (cnikit.daemon.profiles) expects)."""

    def deco(fn):
        REGISTRY.add(name, Scenario(name, description, fn, why, nodes, dict(env or {}),
                                    duration, instance_type, family, dual_stack,
                                    tuple(instance_types), subnets=subnets), fn)
        return fn

    return deco
