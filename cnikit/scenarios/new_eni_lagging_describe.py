"""A burst of pods needs a new ENI while EC2's Describe and the IMDS lag behind it.

EC2 is eventually consistent: right after AttachNetworkInterface, DescribeNetworkInterfaces
may not list the new ENI for a few seconds, and the IMDS serves the new MAC a moment late.
The node fills its first ENI, attaches a second and puts pods on it while both lag. A
reconcile in that window sees an ENI in its datastore that neither source lists yet. A
build that sweeps such an ENI drops its pods' entries; when the ENI shows up again its
addresses come back free, and the next pods get addresses the first ones still use (or the
pool releases them to EC2 under their pods).
"""

from __future__ import annotations

from cnikit.scenarios.common import age_past, settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
BURST = 4


@scenario(
    "new-eni-lagging-describe",
    "a burst of pods needs a new ENI while EC2's Describe and the IMDS lag behind it",
    why="both upstream profiles wait after an attach until IMDS lists the new ENI and only "
        "then use it, and take the ENI list from IMDS, which lists it from then on: they "
        "hold; hardened takes the ENI list from Describe but never removes an ENI that "
        "holds pods on it. It is there for builds (and planted bugs) that sweep an ENI "
        "Describe does not list.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "2"},
)
def run(ctx: Ctx) -> None:
    _, first, on_first = settled(ctx, NODE, ctx.eni_capacity - 1)
    ctx.step(f"{ctx.eni_capacity - 1} pods: the first ENI is nearly full", **on_first)

    # Longer than a few reconciles, so that several run while the new ENI is unlisted.
    lag = max(4.0, ctx.run_seconds(100))
    lasts = lag + max(2.0, ctx.run_seconds(60))
    # Both lags serve EC2 as it was `lag` seconds ago. Begin once every address is older than
    # that, so that what lags is the new ENI alone: begun sooner, both sources also hide the
    # running pods' addresses, how many depending on how fast the machine filled the ENI
    # (1.18.4 then swept them all, in one run of four at once).
    age_past(ctx, lag)
    ctx.ec2_fault("describe-lag", seconds=lag, duration=lasts)
    ctx.imds_fault("lag", target={"instance_id": ctx.instance_id(NODE)}, seconds=lag,
                   duration=lasts)
    ends = ctx.elapsed() + lasts
    ctx.step(f"Describe and IMDS {lag:g}s behind", node=NODE)

    for _ in range(BURST):
        ctx.add_pod(NODE, retry_for=max(5.0, ctx.run_seconds(60)))
    if not ctx.design(lambda: len(ctx.node_enis(NODE)) >= 2, 15, "a second ENI attached"):
        ctx.not_exposed("the build attached no second ENI for the burst")
    second = ctx.node_enis(NODE)[1]
    on_second = [p for p in ctx.pods_on(NODE) if p.ip in second.ips]
    focus = {"node": NODE, "eni": second.eni_id, "mac": second.mac}
    ctx.step(f"a burst: a second ENI with {len(on_second)} pod(s), not yet in Describe",
             **focus)

    # Reconciles while Describe (and for a moment IMDS) do not list the new ENI.
    ctx.wait_reconciles(NODE, 2, timeout=max(10.0, lasts))
    ctx.run_for(max(0.0, ends - ctx.elapsed()))
    ctx.heal()
    ctx.wait_reconciles(NODE, 1)
    ctx.step("Describe caught up; a reconcile", **focus)

    # Pods come and go: a build that took the new ENI's addresses back as free hands one out
    # again, or releases it under its pod.
    for i in range(6):
        mine = ctx.pods_on(NODE)
        if i % 3 == 2 and mine:
            ctx.delete_pod(mine[0])
        else:
            ctx.add_pod(NODE, retry_for=5)
    ctx.wait_reconciles(NODE, 1)
    ctx.step("more pods; a reconcile", **focus)
