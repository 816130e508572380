"""Upstream #3489: in IPv6 mode, ipamd exits at start-up on an unmanaged ENI of the other
family.

An IPv6 node carries a second ENI that the CNI must leave alone (tagged
`node.k8s.amazonaws.com/no_manage=true`: a storage or appliance interface) in an IPv4-only
subnet. IMDS serves no `subnet-ipv6-cidr-blocks` for it (404). v1.20.0-v1.20.4's
getENIMetadata turned that 404 into an error that failed the read of every ENI, ipamd's
init with it ("failed to retrieve attached ENIs info"), and aws-node exited, again at each
restart. Fixed in v1.20.5 (#3489's PR: a 404 there means "no IPv6 block").
"""

from __future__ import annotations

import signal

from cnikit.scenarios.common import attach_unmanaged_eni, peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "ipv6-unmanaged-ipv4-eni",
    "upstream 3489: an IPv6 node's unmanaged IPv4-only ENI, then the daemon restarts",
    why="v1.20.4 fails init on the ENI's missing subnet-ipv6-cidr-blocks and never comes "
        "back; 1.18.x and hardened use the primary ENI's /80 and skip the other ENI.",
    nodes=2,
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    peers(ctx, node=NODE, count=2)
    eni = attach_unmanaged_eni(ctx, NODE, ipv6_only=False)
    ctx.step("an unmanaged ENI of an IPv4-only subnet attached to the node", eni=eni)
    ctx.kill_daemon(NODE, signal.SIGTERM)
    # Not ready within the build's own readiness timeout: a liveness violation.
    ctx.restart_daemon(NODE)
    ctx.step("the daemon restarted")
    peers(ctx, node=NODE, count=2)  # each must get an address of the node's /80
    ctx.step("new pods on the node")
