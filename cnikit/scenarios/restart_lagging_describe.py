"""A daemon restart while EC2's Describe lags behind the node's last assigns and releases.

Right before the restart the node released addresses (and another interface took them) and
assigned new ones for new pods. Start-up reads a Describe of a few seconds ago: it still
shows the released addresses and lacks the new pods'. A build that starts from that
Describe alone keeps the released addresses as free (a new pod on one is dark: EC2 gave
it to another interface) or drops the new pods' checkpointed addresses (they go to a second
pod).
"""

from __future__ import annotations

from cnikit.scenarios.common import age_past, release, settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
RELEASED = 2


@scenario(
    "restart-lagging-describe",
    "a daemon restart while EC2's Describe lags behind the node's own assigns and releases",
    why="both upstream profiles start from IMDS, which follows EC2 here, and keep no "
        "memory of releases they could trip on; hardened starts from EC2 but holds a "
        "checkpointed pod's address IMDS shows and drops free addresses it recalls releasing.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    ctx.spare_interface()  # what takes released addresses: ready before they are released
    pods, eni, focus = settled(ctx, NODE, 4)
    ctx.step("4 pods; EC2, IMDS and the pool agree", **focus)

    lag = max(4.0, ctx.run_seconds(100))
    age_past(ctx, lag)
    fault = ctx.ec2_fault("describe-lag", seconds=lag, duration=lag + ctx.run_seconds(60))
    before_release = ctx.elapsed()
    released = release(ctx, eni, pods[:RELEASED], RELEASED)
    ctx.ec2_take(released)
    for _ in range(2):
        ctx.add_pod(NODE, retry_for=5)
    # Start-up must read the pool as it was just before the releases: a lag measured from
    # here, not a fixed one that may reach back past the node's start (then Describe shows
    # no ENI at all) when the cluster came up quickly.
    lag = round(ctx.elapsed() - before_release + 0.5, 2)
    ctx.end_ec2_fault(fault)
    ctx.ec2_fault("describe-lag", seconds=lag, duration=lag + ctx.run_seconds(60))
    ctx.step(f"Describe {lag:g}s behind: released addresses (taken by another interface) still "
             "in it, the new pods' missing", **focus)

    ctx.restart_daemon(NODE)
    ctx.step("daemon restarted while Describe lags", **focus)
    for _ in range(3):
        ctx.add_pod(NODE, retry_for=5)
        ctx.run_for(0.3)
    ctx.wait_reconciles(NODE, 1)
    ctx.heal()
    ctx.wait_reconciles(NODE, 1)
    ctx.add_pod(NODE, retry_for=5)
    ctx.step("new pods; Describe caught up; a reconcile", **focus)
