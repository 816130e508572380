"""An EC2 outage answers AttachNetworkInterface with a misleading error; once it clears, the
node must get its ENI and serve new pods.

During an AWS outage (cilium #11088) the attach call failed for a while, then answered
"Instance '...' is not 'running' or 'stopped'." (IncorrectInstanceState), which normally
means the instance is going away. The operator believed it, stopped resolving the node's IP
deficit, and the node stayed without ENIs after AWS recovered. Here the node's first ENI is
nearly full when Attach starts failing with that error; the burst of pods that needs a
second ENI may wait out the outage, but once Attach works again every correct build attaches
an ENI and gives new pods addresses (liveness).
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import ec2_call_times, settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
BURST = 3


@scenario(
    "attach-misleading-error",
    "EC2 answers Attach with a misleading error during an outage; after it the node must "
    "still get an ENI and serve pods",
    why="cilium #11088: an outage answered AttachNetworkInterface with IncorrectInstanceState "
        "('not running or stopped') and the operator never retried that node. Every profile "
        "retries a failed attach on its next pool tick: they hold; it is there for builds "
        "(and planted bugs) that believe an error and give up on a node.",
    nodes=2,
    env={"WARM_IP_TARGET": "1"},
)
def run(ctx: Ctx) -> None:
    _, first, focus = settled(ctx, NODE, ctx.eni_capacity - 1)
    ctx.step(f"{ctx.eni_capacity - 1} pods: the first ENI is nearly full", **focus)

    outage = max(3.0, ctx.run_seconds(100))
    began = time.time()
    fid = ctx.ec2_fault("error", target={"action": "AttachNetworkInterface"},
                  code="IncorrectInstanceState",
                  message=f"Instance '{ctx.instance_id(NODE)}' is not 'running' or 'stopped'.",
                  duration=outage)
    ends = time.monotonic() + outage
    ctx.step(f"an outage: Attach answers IncorrectInstanceState for {outage:g}s", node=NODE)

    # A burst that needs a second ENI: it may wait for the outage (no IP yet is no failure).
    for _ in range(BURST):
        ctx.add_pod(NODE, retry_for=max(0.5, ends - time.monotonic()) / BURST)
    ctx.run_for(max(0.0, ends - time.monotonic()))
    ctx.precondition(lambda: fid not in {f["id"] for f in ctx.gate.faults.list()}, 10,
                     "the outage's fault expired")
    tried = ec2_call_times(ctx, ("AttachNetworkInterface",), since=began)
    if not tried and len(ctx.node_enis(NODE)) < 2:
        ctx.not_exposed("the build called no Attach during the outage")
    ctx.step(f"the outage is over; the build tried {len(tried)} attach(es) during it",
             node=NODE)

    # After the outage: every correct build attaches an ENI and serves new pods.
    bound = max(15.0, ctx.run_seconds(300))
    want = min(ctx.eni_capacity + BURST, ctx.max_pods)
    while len(ctx.pods_on(NODE)) < want and ctx.room(NODE) > 0:
        ctx.require_pod(NODE, retry_for=bound)
    ctx.step(f"{len(ctx.pods_on(NODE))} pods on the node after the outage",
             node=NODE, eni=first.eni_id)
