"""cilium/cilium #32346: subnets taken out of subnet discovery while the nodes run.

The nodes' AZ has two more subnets tagged `kubernetes.io/role/cni=1`, larger than the
nodes' own, so a build with subnet discovery puts its new ENIs there. Once it has, an
operator takes both out while the daemons run: one subnet's tag is set to 0 (EKS's
documented exclusion), the other's removed. Then the nodes fill until each needs another
ENI. Upstream re-reads the subnets for every new ENI, so no new ENI may go to either
subnet (`excluded-subnet`); the ENIs already there may keep serving. Every pod must still
get an address (from the nodes' own subnet, or any still tagged).
"""

from __future__ import annotations

from cnikit.check.checkers.excluded_subnet import EXCLUDED
from cnikit.cloud.limits import FALLBACK
from cnikit.daemon.subnets import TAG
from cnikit.scenarios.common import fill, peers
from cnikit.scenarios.engine import SCENARIO, Ctx, Subnets, scenario

ZEROED = "10.0.64.0/20"  # tagged 1, then 0
UNTAGGED = "10.0.80.0/21"  # tagged 1, then the tag removed
NODES = (0, 1)


def enis_in(ctx: Ctx, subnets: dict[str, str], since: set[str] = frozenset()) -> list:
    """EC2's ENIs of the run's nodes in `subnets` (id -> CIDR), but those in `since`."""
    instances = {n.instance_id for n in ctx.fabric.nodes}
    return [e for e in ctx.gate.owners().enis.values()
            if e.instance_id in instances and e.subnet_id in subnets and e.eni_id not in since]


@scenario(
    "subnet-excluded-while-running",
    "cilium 32346: subnets taken out of subnet discovery (tag 0, tag removed) as nodes run",
    why="Upstream before v1.22.0 (validTag) takes a subnet by the tag's key, whatever its "
        "value, so 1.18.3, 1.18.4 and 1.20.4 put the next ENI in the subnet tagged 0: "
        "EKS documents kubernetes.io/role/cni=0 as excluding a subnet, so that is a "
        "violation of the operator's intent (excluded-subnet). A removed tag is obeyed by "
        "every profile. Hardened reads the value as EKS documents it and holds. A build "
        "without subnet discovery never leaves the nodes' subnet: not exposed.",
    nodes=2,
    subnets=Subnets(others=((ZEROED, {TAG: "1"}), (UNTAGGED, {TAG: "1"}))),
)
def run(ctx: Ctx) -> None:
    others = dict(ctx.cluster.topo.other_subnets)
    by_cidr = {cidr: sid for sid, cidr in others.items()}
    peers(ctx, node=1, count=2)
    fill(ctx, 0, ctx.eni_capacity + 1)  # more than one ENI holds: a second ENI for any design
    if not ctx.design(lambda: enis_in(ctx, others), 15,
                      "an ENI of a node in a tagged subnet other than the nodes'"):
        ctx.not_exposed("the build made no ENI outside the nodes' subnet: no subnet "
                        "discovery to judge")
    before = {e.eni_id for e in enis_in(ctx, others)}
    ctx.step(f"{len(before)} ENI(s) in the tagged subnets", enis=sorted(before))
    for node in NODES:  # no ENI half made when the tags change
        ctx.wait_within_targets(node)
    ctx.nemesis.tag_subnet(by_cidr[ZEROED], {TAG: "0"})
    ctx.nemesis.tag_subnet(by_cidr[UNTAGGED], untag=(TAG,))
    for sid, cidr in others.items():
        ctx.history.info(SCENARIO, EXCLUDED, {"subnet": sid, "cidr": cidr})
    ctx.step(f"{ZEROED} tagged {TAG}=0, {UNTAGGED}'s tag removed")
    nodes_enis = {n: len(ctx.node_enis(n)) for n in NODES}
    most = FALLBACK[ctx.instance_type].max_enis
    for node in NODES:  # a node with room for another ENI is filled past the ENIs it has
        if nodes_enis[node] < most:
            fill(ctx, node, nodes_enis[node] * ctx.eni_capacity + 1 - len(ctx.pods_on(node)))
    grew = ctx.design(lambda: any(len(ctx.node_enis(n)) > nodes_enis[n] for n in NODES), 15,
                      "a new ENI on a node after the subnets were excluded")
    ctx.step("the nodes filled past their ENIs" + ("" if grew else ": no new ENI"),
             enis={n: [e.subnet_id for e in ctx.node_enis(n)] for n in NODES})
