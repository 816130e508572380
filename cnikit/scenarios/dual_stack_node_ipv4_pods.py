"""Upstream #3156 / PR #3157: an IPv4 cluster's nodes in dual-stack subnets.

The node's primary ENI holds IPv4 and IPv6 addresses, and IMDS lists its `ipv6s` before its
`local-ipv4s` (the MAC's entries in name order). A change on upstream's master (#3122)
stopped reading an ENI's entries at the first address family it found there: on such a
node it saw the IPv6 addresses only, the ENI's primary IPv4 came back empty and ipamd's
init failed, again at each restart. It was reverted before v1.19.1 (#3157) and fixed for
good by #3156; no tagged release had it, so every profile holds here. A build that reads
an ENI's entries as that change did fails: its daemon is not ready, or its pods get no
IPv4 address (liveness).
"""

from __future__ import annotations

import ipaddress
import signal

from cnikit.scenarios.common import peers
from cnikit.scenarios.engine import Ctx, Liveness, scenario

NODE = 0


@scenario(
    "dual-stack-node-ipv4-pods",
    "upstream 3156: IPv4 pods on nodes whose ENIs hold IPv6 addresses too; the daemon "
    "restarts",
    why="no tagged release read an ENI's IMDS entries up to the first family only (the "
        "change was reverted before v1.19.1): every profile takes the ENI's local-ipv4s and "
        "serves IPv4 pods on a dual-stack node, across a restart.",
    nodes=2,
    dual_stack=True,
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    pods = peers(ctx, node=NODE, count=2)
    _ipv4_only(pods)
    ctx.step("IPv4 pods on dual-stack nodes")
    ctx.kill_daemon(NODE, signal.SIGTERM)
    ctx.restart_daemon(NODE)
    ctx.step("the daemon restarted")
    _ipv4_only(peers(ctx, node=NODE, count=2))
    ctx.step("new IPv4 pods on the node")


def _ipv4_only(pods) -> None:
    """An IPv4 build's pods have IPv4 addresses, whatever else the node's ENIs hold."""
    for pod in pods:
        if ipaddress.ip_address(pod.ip).version != 4:
            raise Liveness(f"pod {pod.name}", f"an IPv4 build gave it {pod.ip}, no IPv4 address")
