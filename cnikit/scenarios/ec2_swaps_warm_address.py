"""EC2 swaps the node's warm address for another: IMDS follows, the count stays the same.

EC2 moves the one free address of node 0's warm pool to another node and assigns a new
address of the subnet to node 0's ENI (an operator's or another controller's doing). IMDS
follows EC2: it lists as many addresses as the daemon's datastore holds, but not the same
ones. After the build's next reconcile pass, new pods come. A build that takes equal counts
for agreement and then trusts its datastore (asking neither IMDS's list nor EC2) hands the
moved address to a new pod: it is dark (EC2 routes it to the other node). Twice.
"""

from __future__ import annotations

import ipaddress

from cnikit.scenarios.common import interface_with_room, settled, warm_addresses
from cnikit.scenarios.engine import Ctx, Precondition, scenario

NODE = 0
CYCLES = 2


@scenario(
    "ec2-swaps-warm-address",
    "EC2 swaps the node's warm address for a new one; IMDS follows with the same count",
    why="IMDS is right here: 1.18.3, on equal lengths, takes IMDS's list (the new address "
        "verified with EC2) and drops the moved one; 1.18.4 and hardened see the contents "
        "differ and ask EC2. A build that stops at equal counts (the imds-agrees-by-length "
        "mutant: hardened's compare by length) keeps the moved address and gives it out.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    pods, eni, focus = settled(ctx, NODE, 3)
    ctx.wait_imds_follows(NODE, eni.eni_id)
    ctx.step("3 pods; EC2, IMDS and the pool agree", **focus)
    for cycle in range(CYCLES):
        ctx.wait_within_targets(NODE)
        warm = warm_addresses(ctx, NODE, eni)
        other = interface_with_room(ctx, 1, len(warm))
        new = _free_addresses(ctx, len(warm))
        for ip in warm:  # moved from the node's ENI (AllowReassignment)
            ctx.nemesis.assign(ip, other, allow_reassignment=True)
        for ip in new:
            ctx.nemesis.assign(ip, eni.eni_id)
        ctx.wait_imds_follows(NODE, eni.eni_id)
        ctx.step(f"cycle {cycle + 1}: EC2 moves {', '.join(warm)} to another node and gives "
                 f"the ENI {', '.join(new)}; IMDS follows", **focus)
        # Two: a pass applies what it read after the read (1.18.4 and hardened ask EC2 first),
        # so a pod added right after the first read counted can come before its effect.
        ctx.wait_reconciles(NODE, 2)
        for _ in range(2):
            ctx.add_pod(NODE, retry_for=max(5.0, ctx.run_seconds(60)))
        ctx.step(f"cycle {cycle + 1}: a reconcile pass, then 2 new pods (none may get "
                 f"{', '.join(warm)})", **focus)


def _free_addresses(ctx: Ctx, count: int) -> list[str]:
    """Addresses of the subnet no ENI has, from the top (clear of the build's own picks:
    EC2 hands out the lowest free first). AWS reserves the first four and the last."""
    subnet = ipaddress.ip_network(ctx.fabric.topo.subnet_cidr)
    owned = ctx.gate.owners().ips
    hosts = list(subnet.hosts())[3:-1]
    free = [str(ip) for ip in reversed(hosts) if str(ip) not in owned]
    if len(free) < count:
        raise Precondition(f"{count} free addresses in the subnet")
    return free[:count]
