"""EC2 takes a free address of the node's warm pool while the node's IMDS is stale.

The node's IMDS stops following its ENI (a broken metadata service), and then EC2 gives the
one free address of the node's warm pool to another node. IMDS still lists it and still
agrees with the daemon's datastore. Only EC2 knows. Several reconcile passes later, new
pods come. A build that asks EC2 only when IMDS disagrees with its datastore never learns
of the take: it hands the address to a new pod, which is dark (EC2 routes the address to the
other node) or shares it with a pod there.
"""

from __future__ import annotations

from cnikit.scenarios.common import interface_with_room, settled, warm_addresses
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
PASSES = 6  # reconcile passes a build gets to check EC2 while IMDS is stale


@scenario(
    "ec2-takes-warm-address",
    "EC2 gives a warm address to another node while the node's stale IMDS still lists it",
    why="both upstream profiles ask EC2 only when IMDS differs from the datastore; here the "
        "stale IMDS matches it, so they never learn of the take and give the address to a "
        "new pod; hardened also asks EC2 every few reconciles and drops the address.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    pods, eni, focus = settled(ctx, NODE, 3)
    ctx.wait_imds_follows(NODE, eni.eni_id)
    ctx.step("3 pods; EC2, IMDS and the pool agree", **focus)

    stale = ctx.imds_fault("stale", target={"mac": eni.mac})
    warm = warm_addresses(ctx, NODE, eni)
    other = interface_with_room(ctx, 1, len(warm))
    for ip in warm:  # moved from the node's ENI (AllowReassignment)
        ctx.nemesis.assign(ip, other, allow_reassignment=True)
    ctx.step(f"IMDS stale; EC2 gives the warm {', '.join(warm)} to another node", **focus)

    ctx.wait_reconciles(NODE, PASSES)
    ctx.step(f"{PASSES} reconcile passes", **focus)
    for _ in range(2):
        ctx.add_pod(NODE, retry_for=max(5.0, ctx.run_seconds(60)))
    ctx.step("new pods (none may get the taken address)", **focus)

    ctx.end_imds_fault(stale)
    ctx.wait_reconciles(NODE, 1)
    ctx.add_pod(NODE, retry_for=5)
    ctx.step("IMDS catches up; a reconcile; a new pod", **focus)
