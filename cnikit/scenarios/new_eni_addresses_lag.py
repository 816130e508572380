"""A burst needs a new ENI while Describe shows it attached before its secondary addresses.

Right after AttachNetworkInterface, EC2's Describe may show the new ENI attached while its
secondary address list is still empty (upstream #1148, #989). A daemon that waited for the
attachment alone entered the ENI into its datastore with no addresses; its next Assign on
it hit PrivateIpAddressLimitExceeded (EC2 had given the addresses already), which it
ignored. Here the node's first ENI is nearly full when every ENI attached from then on shows
its addresses late. Whatever a build does meanwhile, it must never hand out an address EC2
did not give the node, nor one twice (the checkers), and once Describe caught up it must
serve new pods on the new ENI (liveness).
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import ec2_call_times, settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
BURST = 4


@scenario(
    "new-eni-addresses-lag",
    "a burst needs a new ENI while Describe shows it attached before its addresses",
    why="upstream #1148 and #989 (fixed by #1174): after an attach the daemon waited only for "
        "the ENI to show attached, entered it empty and its next Assign hit "
        "PrivateIpAddressLimitExceeded, ignored. The upstream profiles take a new ENI's "
        "addresses from IMDS and hardened from the create answer: they hold (no "
        "PrivateIpAddressLimitExceeded on seeds 1-5). It guards builds that trust the "
        "lagging list; the planted bug that does (#989 exactly) only makes pods wait.",
    nodes=2,
    env={},  # upstream's defaults (WARM_ENI_TARGET 1): a new ENI comes with all its addresses
)
def run(ctx: Ctx) -> None:
    _, first, focus = settled(ctx, NODE, ctx.eni_capacity - 1)
    ctx.step(f"{ctx.eni_capacity - 1} pods: the first ENI is nearly full", **focus)

    # Longer than a few reconciles, so that several run while the list lags.
    before = {e.eni_id for e in ctx.node_enis(NODE)}
    lag = max(4.0, ctx.run_seconds(100))
    lasts = lag + max(2.0, ctx.run_seconds(60))
    began = time.time()
    fid = ctx.ec2_fault("addresses-lag", seconds=lag, new_enis=True, duration=lasts)
    ends = time.monotonic() + lasts
    ctx.step(f"Describe shows new ENIs' addresses {lag:g}s late", node=NODE)

    # The burst may wait while the list lags (a build may wait for Describe, as #1174 does).
    def new_eni():
        return next((e for e in ctx.node_enis(NODE) if e.eni_id not in before), None)

    for _ in range(ctx.eni_capacity * len(before) + BURST - len(ctx.pods_on(NODE))):
        if new_eni() is not None or ctx.room(NODE) <= 0:
            break
        ctx.add_pod(NODE, retry_for=max(0.5, ctx.run_seconds(40)))
    second = ctx.design(new_eni, max(10.0, lasts), "a new ENI attached")
    if second is None:
        ctx.not_exposed("the build attached no new ENI for the burst")
    attached = ec2_call_times(ctx, ("AttachNetworkInterface",), eni_id=second.eni_id,
                              ok_only=True)
    if attached and attached[-1] < began:
        ctx.not_exposed("the new ENI was attached before the fault began")
    focus = {"node": NODE, "eni": second.eni_id, "mac": second.mac}
    ctx.step(f"a new ENI, its addresses not yet in Describe; "
             f"{len(ctx.pods_on(NODE))} pods on the node", **focus)

    ctx.run_for(max(0.0, ends - time.monotonic()))
    ctx.precondition(lambda: fid not in {f["id"] for f in ctx.gate.faults.list()}, 10,
                     "the lag's fault expired")
    ctx.step("Describe caught up", **focus)

    # Describe shows every address: the node serves pods onto the new ENI.
    bound = max(15.0, ctx.run_seconds(300))
    want = min(ctx.eni_capacity * (len(before) + 1) - 2, ctx.max_pods)
    while len(ctx.pods_on(NODE)) < want and ctx.room(NODE) > 0:
        ctx.require_pod(NODE, retry_for=bound)
    for _ in range(3):  # pods come and go on the new ENI
        mine = [p for p in ctx.pods_on(NODE) if p.ip in second.ips]
        if mine:
            ctx.delete_pod(mine[0])
        ctx.require_pod(NODE, retry_for=bound)
    ctx.wait_reconciles(NODE, 1)
    ctx.step(f"{len(ctx.pods_on(NODE))} pods on the node; a reconcile", **focus)
