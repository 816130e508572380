"""EC2's Describe lags behind the node's own assigns and releases while pods come and go.

DescribeNetworkInterfaces shows the state of a few seconds ago (EC2 is eventually
consistent), longer than the reconcile cooldown, while the node keeps changing its pool:
addresses it just assigned for new pods are missing from Describe, addresses it just
released (and another tenant of the subnet then took) are still in it. The node's IMDS
follows EC2 a second late, as a hypervisor's does, and leaves out one pod's address, so the
daemon's views disagree and it asks EC2 on every reconcile. A build that believes Describe alone drops its
new pods' addresses (they come back free: two pods on one address) or takes the released
ones back (a pod on an address EC2 gave to someone else).
"""

from __future__ import annotations

from cnikit.scenarios.common import age_past, release, settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
RELEASED = 2


@scenario(
    "describe-lag-churn",
    "EC2's Describe lags behind the node's own assigns and releases while pods churn",
    why="both upstream profiles take a differing ENI's addresses from the lagging Describe: "
        "the new pods' addresses are swept from the datastore (force-removed, then handed out "
        "again) and released ones re-added once their cooldown ends; hardened takes an address "
        "away on Describe alone only while no pod holds it, and adds one only when IMDS shows "
        "it too.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    ctx.spare_interface()  # what takes released addresses: ready before they are released
    pods, eni, focus = settled(ctx, NODE, 4)
    ctx.step("4 pods; EC2, IMDS and the pool agree", **focus)

    # Longer than the reconcile cooldown (60 s upstream) and two reconciles after it.
    lag = max(6.0, ctx.run_seconds(160))
    lasts = lag + max(2.0, ctx.run_seconds(80))
    age_past(ctx, lag)
    # No duration: healed after the churn, which runs in the faults whatever the releases
    # took (a build that keeps its addresses makes the release step wait its whole bound).
    ctx.ec2_fault("describe-lag", seconds=lag)
    ctx.imds_fault("lag", target={"mac": eni.mac}, seconds=max(0.5, ctx.run_seconds(20)))
    # One pod stays throughout, its address left out of IMDS's list: the views disagree at
    # every reconcile pass, so each asks EC2 (a lag alone let them agree at a pass often,
    # measured: then a build's trust in Describe went untested).
    witness = pods[-1]
    ctx.imds_fault("missing", target={"mac": eni.mac, "ips": [witness.ip]})
    ends = ctx.elapsed() + lasts
    ctx.step(f"Describe {lag:g}s behind, IMDS a moment behind and without {witness.ip}",
             **focus)

    with ctx.take_released(eni.eni_id) as taker:  # before the build hears the answer
        taker.close(expect=release(ctx, eni, pods[:RELEASED], RELEASED))
    ctx.step("released addresses taken by another interface; Describe still shows them", **focus)
    ends = max(ends, ctx.elapsed() + max(2.0, ctx.run_seconds(80)))

    # Pods keep coming and going until Describe catches up, past the releases' cooldown:
    # each new pod's address is one the node assigns now, missing from Describe, and a
    # build that took a released address back hands it to one of them. As many go as come,
    # so the ENI never fills up and every new pod gets an address to be judged by.
    for i in range(60):  # bounded; about 0.4 s each
        if ctx.elapsed() >= ends:
            break
        mine = [p for p in ctx.pods_on(NODE) if p is not witness]
        if i % 2 == 1 and len(mine) > 2:
            ctx.delete_pod(mine[0])
        else:
            ctx.add_pod(NODE, retry_for=3)
        ctx.run_for(0.3)
    ctx.step("churn until Describe caught up", **focus)

    ctx.heal()
    ctx.wait_reconciles(NODE, 1)
    ctx.add_pod(NODE, retry_for=5)
    ctx.step("a reconcile; a new pod", **focus)
