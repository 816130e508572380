"""EC2 takes an address away while a pod holds it, then hands it back to the node.

Another interface takes the pod's address (`AllowReassignment`, an operator or a buggy
controller elsewhere): the pod is dark while it is taken, by the nemesis's own act (the
checkers excuse that, cnikit.check.damage). Then EC2 hands it back to the node. The build
must keep the address for its pod the whole time: never give it to a second pod, neither
while it is taken nor after, and the pod must be reachable again once it is back. A second
address is taken from a pod that is then deleted while the address is still elsewhere: the
build must not hand it to the next pod.

EC2 moves single secondary addresses only: an address inside a prefix the node holds (a
prefix-delegating build's) is refused as "in use by an ipv4 prefix". A build whose pods all
have such addresses is not exposed to this scenario.
"""

from __future__ import annotations

from cnikit.scenarios.common import settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "ec2-takes-held-address",
    "EC2 moves a pod's address to another interface and later back; never a second pod on it",
    why="both upstream profiles see the address gone from IMDS and Describe and force-remove it "
        "from the datastore with its pod's entry; when EC2 hands it back it is re-added as free "
        "and a new pod gets the address the first still uses; hardened keeps the pod's "
        "entry, quarantined, until both sources show it again.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    elsewhere = ctx.spare_interface()
    pods, eni, focus = settled(ctx, NODE, 3)
    ctx.step("3 pods; EC2, IMDS and the pool agree", **focus)

    movable = _movable(ctx, pods)
    if len(movable) < 2:
        ctx.not_exposed(f"node {NODE}'s pods hold no single secondary addresses (EC2 moves "
                        "none inside a prefix): nothing for EC2 to take")
    victim, holder = movable[:2]
    taken = ctx.nemesis.take_held(victim.ip, elsewhere)
    ctx.step(f"EC2 gives {victim.ip} (held by {victim.name}) to another interface",
             **focus)
    ctx.wait_reconciles(NODE, 2)
    ctx.add_pod(NODE, retry_for=5)
    ctx.nemesis.give_back(taken, eni.eni_id)
    ctx.step(f"EC2 hands {victim.ip} back to the node", **focus)
    ctx.wait_reconciles(NODE, 1)
    for _ in range(2):
        ctx.add_pod(NODE, retry_for=5)
    ctx.step("reconcile; new pods (none may get the victim's address)", **focus)

    # The holder leaves while its address is elsewhere, on a full ENI (MAX_ENI=1): right
    # after a reconcile, so when the new pods come the build may still know the address
    # and has no other one to give.
    while len(ctx.pods_on(NODE)) < ctx.eni_capacity:
        if ctx.add_pod(NODE, retry_for=5) is None:
            break
    taken = ctx.nemesis.take_held(holder.ip, elsewhere)
    ctx.wait_reconciles(NODE, 1)
    ctx.delete_pod(holder)
    ctx.run_for(max(0.2, ctx.run_seconds(32)))  # past the IP cooldown (30 s upstream)
    for _ in range(2):
        ctx.add_pod(NODE, retry_for=8)
    ctx.step(f"{holder.name} deleted while EC2 had {holder.ip} elsewhere; new pods", **focus)
    try:
        ctx.nemesis.give_back(taken, eni.eni_id)
    except Exception as e:  # noqa: BLE001 - the build filled the ENI meanwhile (recorded)
        if "PrivateIpAddressLimitExceeded" not in str(e):
            raise
        ctx.step("the node's ENI is full again: the address stays elsewhere", **focus)
    ctx.wait_reconciles(NODE, 1)
    ctx.step("a reconcile", **focus)


def _movable(ctx: Ctx, pods: list) -> list:
    """The pods whose address EC2 assigns as a secondary address of its own (not the ENI's
    primary, not inside a prefix): the ones AssignPrivateIpAddresses can move."""
    owners = ctx.gate.owners().ips
    return [p for p in pods if p.ip in owners and not owners[p.ip].primary]
