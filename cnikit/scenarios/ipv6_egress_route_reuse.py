"""Upstream #3702: after bursts of pods, an IPv6 pod has no IPv4 egress.

An IPv6 pod reaches IPv4 destinations through its node (upstream's egress-cni): an address
X of a small link-local range on its v4if0, a host route X/32 back to it, SNAT to the
node's IPv4. The runtime sends a pod's DEL before it removes the pod's namespace; the DEL
frees X at once (host-local), while the old veth, and its route X/32, live on until the
namespace goes. A new pod given X meanwhile finds that route: before v1.22.4 upstream took
the EEXIST as done, the old route kept X, and once the old namespace went the new pod had
no return path at all, for good. The fix (v1.22.4) retries, then fails the ADD; replacing
the stale route is as good (the address is the new pod's).

The egress range is made small (CNIKIT_V4_EGRESS_RANGE, the reference's knob for the
conflist's range) so that a freed address comes back within a few ADDs, as it does in a
burst of hundreds on the real /22. A build that never hands a new pod an address an old
sandbox still holds is not exposed.
"""

from __future__ import annotations

import time

from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
RANGE = "169.254.172.0/29"  # gateway .1, pods .2-.6
ADDS = 12  # ADDs tried for a new pod given an address a kept sandbox still holds


@scenario(
    "ipv6-egress-route-reuse",
    "upstream 3702: a new IPv6 pod gets the IPv4 egress address of a pod whose DEL is done "
    "but whose namespace is not gone yet",
    why="1.18.x and 1.20.4 add the new pod's return route ignoring EEXIST (fixed in "
        "v1.22.4): the old route wins, then goes with the old namespace; hardened replaces it.",
    nodes=2,
    env={"CNIKIT_V4_EGRESS_RANGE": RANGE},
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    ctx.require_pod(1)
    live = [ctx.require_pod(NODE) for _ in range(2)]
    egress = {p.name: _egress_ip(ctx, p) for p in live}
    if not any(egress.values()):
        ctx.not_exposed("the build gives its IPv6 pods no IPv4 egress (no IPv4 address in "
                        "the pod)")
    kept = live.pop(0)  # its DEL is answered; the runtime has not removed its netns yet
    if not ctx.try_delete(kept, "del-before-netns-removal"):
        ctx.step("the DEL failed: the pod stays", pod=kept.name)
        return
    ctx.step("pod deleted, its namespace kept a moment", pod=kept.name, egress=egress[kept.name])
    taker = None
    for _ in range(ADDS):
        pod = ctx.require_pod(NODE)
        if _egress_ip(ctx, pod) == egress[kept.name]:
            taker = pod
            break
        live.append(pod)
        if len(live) > 2:  # pods come and go, as in a burst
            ctx.delete_pod(live.pop(0))
    if taker is None:
        ctx.cluster.delete_pod(kept, send_del=False)
        ctx.not_exposed(f"no new pod was given {egress[kept.name]} while the old sandbox "
                        f"held it, in {ADDS} ADDs")
    ctx.step("a new pod has the kept sandbox's egress address", pod=taker.name,
             egress=egress[kept.name])
    ctx.cluster.delete_pod(kept, send_del=False)  # the runtime removes the old namespace
    gone = time.monotonic()
    ctx.step("the old namespace removed")
    # An answer after the old veth went, or silence past the probe's grace (then the
    # no-ipv4-egress checker has its violation).
    ctx.wait_until(lambda: ctx.watch.egress.judged(taker.name, gone), 10,
                   "the new pod's IPv4 egress judged")
    ctx.step("IPv4 egress judged")


def _egress_ip(ctx: Ctx, pod) -> str | None:
    """The IPv4 address the pod's namespace holds (its IPv4 egress), seen from outside."""
    from cnikit.fabric import wiring

    nl = wiring.netlink_in(pod.ns.fd)
    try:
        addrs = [a.ip for a in nl.addrs() if not a.ip.startswith("127.")]
    finally:
        nl.close()
    return addrs[0] if addrs else None
