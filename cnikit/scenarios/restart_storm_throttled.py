"""Every node's daemon restarted at once under the account's EC2 rate limit (upstream 873,
617): one token bucket shared by every node and every action, as EC2 throttles an account.

The limit stays in force for the whole run: it is the account's, not an outage. Every
daemon is killed, then all are started together, and each node is asked for new pods. A
build whose start-up and pool calls back off when EC2 answers RequestLimitExceeded gets
through the storm within the limit; one that retries at once keeps the shared bucket empty,
so neither its own start-up nor any other node's gets the run of calls it needs: no daemon
becomes ready, or no new pod gets an address (liveness). Running pods keep their addresses
and their traffic throughout (a throttled call changes nothing).
"""

from __future__ import annotations

from cnikit.scenarios.common import restart_all_under_limit
from cnikit.scenarios.engine import Ctx, scenario

RATE, BURST = 1.0, 3.0  # calls per second for the whole account, and its bucket
NODES = 3


@scenario(
    "restart-storm-throttled",
    "every daemon restarted at once under an account-wide EC2 rate limit; new pods after",
    why="upstream 873/617: every node restarted at once and their Describe calls throttled "
        "the account (fixes 808, 809, 909 cut and spread the calls). Under one bucket for "
        "the account a build that backs off starts and serves new pods within the limit; "
        "one that retries at once starves every node, itself included (liveness).",
    nodes=NODES,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    nodes = list(range(NODES))
    limit = restart_all_under_limit(ctx, nodes, RATE, BURST)
    ctx.run_for(ctx.run_seconds(30))
    ctx.end_ec2_fault(limit)
    for n in nodes:
        ctx.require_pod(n, retry_for=10)
    ctx.step("limit lifted; a new pod on every node")
