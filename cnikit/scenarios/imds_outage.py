"""Every IMDS call fails (HTTP 500) for a while, spanning reconciles, while pods churn."""

from __future__ import annotations

from cnikit.scenarios.common import churn, peers
from cnikit.scenarios.engine import Ctx, scenario


@scenario(
    "imds-outage",
    "every IMDS call fails for a while (reconciles included) while pods churn",
    why="a failed IMDS read aborts the reconcile (reconcileFailedGetENIs) and changes "
        "nothing; an error is no stale view, so no profile acts on it.",
    nodes=2,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    peers(ctx, node=0, count=2)
    outage = ctx.imds_fault("error", status=500)
    ctx.step("IMDS answers 500 to everything")
    churn(ctx, [0, 1], cycles=12, max_pods=8)
    ctx.wait_reconciles(0, 2, attempts=True)  # IMDS fails: the passes ask and give up
    ctx.step("two reconciles during the outage")
    ctx.end_imds_fault(outage)
    churn(ctx, [0, 1], cycles=6, max_pods=8)
    ctx.wait_reconciles(0, 1)
    ctx.step("IMDS back; reconcile")
