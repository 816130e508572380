"""EC2 throttles half of all calls (RequestLimitExceeded) while pods churn on every node."""

from __future__ import annotations

from cnikit.scenarios.common import churn, peers
from cnikit.scenarios.engine import Ctx, scenario


@scenario(
    "ec2-throttle-storm",
    "RequestLimitExceeded on half the EC2 calls while pods churn",
    why="a throttled call changes nothing: assign/attach fail and are retried, the reconcile "
        "aborts when EC2 fails; pods may wait for an IP (ADD retried), none loses one.",
    nodes=2,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    peers(ctx, node=0, count=2)
    fid = ctx.ec2_fault("throttle", probability=0.5)
    ctx.step("EC2 throttles half the calls")
    churn(ctx, [0, 1], cycles=24, max_pods=10, retry_for=15)
    ctx.wait_reconciles(0, 1)
    ctx.step("churn done; a reconcile under throttling")
    ctx.end_ec2_fault(fid)
    for n in (0, 1):
        ctx.wait_within_targets(n, 20)
    ctx.step("storm over, pools within targets")
