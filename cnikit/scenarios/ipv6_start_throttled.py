"""Every IPv6 node's daemon restarted at once under the account's EC2 rate limit (upstream
873, 617 in IPv6 mode): one token bucket shared by every node and every action.

In IPv6 mode a daemon's start-up is a handful of EC2 calls per node (the instance, its
type, the primary ENI's /80 from DescribeNetworkInterfaces, AssignIpv6Addresses when it has
none), and then none at all: no pool manager, no reconcile. A fleet restarted together
(an aws-node upgrade rolling every node at once) spends the account's bucket at once. A
build whose start-up backs off on RequestLimitExceeded comes up within the limit; one that
retries at once keeps the shared bucket empty for every node, itself included: no daemon
becomes ready, or no new pod gets an address (liveness). Running pods keep their addresses
and traffic throughout: a throttled call changes nothing.
"""

from __future__ import annotations

from cnikit.scenarios.common import restart_all_under_limit
from cnikit.scenarios.engine import Ctx, scenario

RATE, BURST = 2.0, 3.0  # calls per second for the whole account, and its bucket
NODES = 3


@scenario(
    "ipv6-start-throttled",
    "IPv6 mode: every daemon restarted at once under an account-wide EC2 rate limit; new "
    "pods after",
    why="upstream 873/617 in IPv6 mode: every profile's start-up backs off on "
        "RequestLimitExceeded, takes the /80 from EC2 in a few calls and then needs EC2 no "
        "more, so every node comes up and serves pods under one bucket for the account. A "
        "build that retries at once starves every node, itself included (liveness).",
    nodes=NODES,
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    nodes = list(range(NODES))
    limit = restart_all_under_limit(ctx, nodes, RATE, BURST)
    # Pods come and go under the limit: IPv6 mode asks EC2 nothing for them.
    for n in nodes:
        mine = ctx.pods_on(n)
        ctx.delete_pod(mine[0])
        ctx.require_pod(n, retry_for=10)
    ctx.end_ec2_fault(limit)
    for n in nodes:
        ctx.require_pod(n, retry_for=10)
    ctx.step("pods deleted and added; limit lifted; a new pod on every node")
