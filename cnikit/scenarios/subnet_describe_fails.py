"""aws/amazon-vpc-cni-k8s #3753: DescribeSubnets fails while a node starts and grows.

A HyperPod node's ENI sat in a subnet of another account, which DescribeSubnets could not
see; v1.22.2's subnet discovery then never recorded the node's primary IP, and handed it to
a pod (fixed by PR #3754). Here node 0's daemon starts with DescribeSubnets denied
(`subnet-access-denied`: a role without ec2:DescribeSubnets), node 1's with the nodes'
subnet invisible to it (`subnet-not-found`), and each node then fills past two ENIs, so
the build needs new ENIs while the fault holds. Another subnet of the AZ is tagged for
discovery, so a build that falls back has somewhere else it could have gone. No pod may
hold its node's primary IP, or share or lose an address (`shared-ip`, `ip-not-owned`,
reachability), and every pod must get one: the nodes' own subnet still serves.
"""

from __future__ import annotations

import signal

from cnikit.daemon.subnets import TAG
from cnikit.scenarios.common import fill, peers
from cnikit.scenarios.engine import Ctx, Subnets, scenario

OTHER = "10.0.64.0/20"


@scenario(
    "subnet-describe-fails",
    "upstream 3753: DescribeSubnets denied or not finding the nodes' subnet at start-up "
    "and in a burst that needs new ENIs",
    why="The bug is v1.22.2's: 1.18.3, 1.18.4 and 1.20.4 record the primary IP from the "
        "instance's own ENI list, whatever DescribeSubnets answers, and make their ENIs in "
        "the node's own subnet when it fails (\"Defaulting to same subnet as the primary "
        "interface\"); hardened does the same. All hold.",
    nodes=2,
    subnets=Subnets(others=((OTHER, {TAG: "1"}),)),
)
def run(ctx: Ctx) -> None:
    subnet = ctx.nemesis.nodes_subnet()
    for node, kind, attrs in ((0, "subnet-access-denied", {}),
                              (1, "subnet-not-found", {"subnet": subnet})):
        fault = ctx.ec2_fault(kind, target={"action": "DescribeSubnets"}, **attrs)
        ctx.kill_daemon(node, signal.SIGTERM)
        ctx.restart_daemon(node)
        ctx.step(f"node {node}'s daemon started with DescribeSubnets answering {kind}",
                 node=node)
        peers(ctx, node=1 - node, count=1)
        fill(ctx, node, 2 * ctx.eni_capacity + 1 - len(ctx.pods_on(node)))
        ctx.step(f"node {node} filled past two ENIs under the fault", node=node,
                 enis=[e.subnet_id for e in ctx.node_enis(node)])
        ctx.end_ec2_fault(fault)
