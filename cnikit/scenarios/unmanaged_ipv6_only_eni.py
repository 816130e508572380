"""Upstream #3681 (and #3489's other half): an IPv4 node's unmanaged IPv6-only ENI, then the
daemon restarts.

An IPv4 cluster's node in a dual-stack VPC carries a second ENI the CNI must leave alone
(tagged `node.k8s.amazonaws.com/no_manage=true`), in an IPv6-only subnet: IMDS lists its
`ipv6s` and has no `local-ipv4s` nor `subnet-ipv4-cidr-block` for it (404). ipamd reads every
attached ENI's metadata before it filters the unmanaged ones: v1.18.x asked for each ENI's
subnet-ipv4-cidr-block and failed the whole read on the 404, v1.19.4 to v1.23.0 found no
address of the family they looked for ("No IPv4 and IPv6 addresses found"); either way
init failed and aws-node exited, again at each restart. Fixed in v1.23.1 (#3681).
"""

from __future__ import annotations

import signal

from cnikit.scenarios.common import attach_unmanaged_eni, peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "unmanaged-ipv6-only-eni",
    "upstream 3681: an IPv4 node's unmanaged IPv6-only ENI, then the daemon restarts",
    why="1.18.x read every ENI's subnet-ipv4-cidr-block from IMDS at start-up and fail on "
        "the IPv6-only ENI's 404, so the daemon never comes back; hardened takes its ENIs "
        "from EC2 and skips one without IPv4 or tagged no_manage.",
    nodes=2,
    dual_stack=True,
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    peers(ctx, node=NODE, count=2)
    eni = attach_unmanaged_eni(ctx, NODE, ipv6_only=True)
    ctx.step("an unmanaged ENI of an IPv6-only subnet attached to the node", eni=eni)
    ctx.kill_daemon(NODE, signal.SIGTERM)
    # Not ready within the build's own readiness timeout: a liveness violation.
    ctx.restart_daemon(NODE)
    ctx.step("the daemon restarted")
    peers(ctx, node=NODE, count=2)
    ctx.step("new pods on the node")
