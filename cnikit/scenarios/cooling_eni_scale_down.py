"""Pods leave a node that keeps a warm ENI: an ENI whose last pod just left must stay attached
until that pod's address has cooled down.

Node 0 runs on a t3.small (3 ENIs, 3 secondary addresses each) with WARM_ENI_TARGET=1. Pods
fill all three ENIs; then every pod leaves except one on each secondary ENI, and their
addresses cool down: the pool now holds more than two ENIs' worth of free addresses, so the
build wants to free an ENI, but each still has a pod. The pod on the last ENI is deleted. A
correct build frees that ENI only once the pod's address has cooled down. A build that frees
it at once returns its addresses to the subnet, where EC2 hands out the lowest free ones
first: the new pods that then fill the node get a new ENI with those very addresses, and the
deleted pod's peers, still sending to its address, reach a new pod: `early-reuse` (1091 by
way of an ENI).
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import peers, pods_until_reuse
from cnikit.scenarios.engine import Ctx, Precondition, scenario

NODE = 0
ENIS = 3
SLOTS = 3  # t3.small: 4 addresses per ENI, one of them the primary


@scenario(
    "cooling-eni-scale-down",
    "pods leave a warm-ENI node: an ENI whose only used address is cooling down must stay "
    "until it has cooled",
    why="upstream's getDeletableENI skips an ENI with pods or with addresses in cooldown "
        "(hasIPInCooling), and every profile shares it: all hold. A build that frees the ENI "
        "at once (the eni-freed-while-cooling mutant) gives the deleted pod's address, back "
        "in the subnet, to a new pod within the cooldown: early-reuse.",
    nodes=2,
    env={"WARM_ENI_TARGET": "1", "MAX_ENI": str(ENIS), "IP_COOLDOWN_PERIOD": "200"},
    instance_type="t3.small",
)
def run(ctx: Ctx) -> None:
    cooldown = ctx.ip_cooldown
    peers(ctx, node=1, count=2)
    pods = _fill(ctx)
    enis = ctx.node_enis(NODE)
    focus = {"node": NODE, "eni": enis[-1].eni_id, "mac": enis[-1].mac}
    ctx.step(f"{len(pods)} pods on node {NODE}'s {len(enis)} ENIs", **focus)

    # One pod stays on each secondary ENI (none can be freed); the others leave and cool.
    keep = {}
    for pod, eni in zip(pods, _enis_of(ctx, pods), strict=True):
        if eni != enis[0].eni_id and eni not in keep:
            keep[eni] = pod
    for pod in pods:
        if pod not in keep.values():
            ctx.delete_pod(pod)
    ctx.run_for(cooldown)
    ctx.wait_pool_settles(NODE, timeout=cooldown + 15)
    if [e.eni_id for e in ctx.node_enis(NODE)] != [e.eni_id for e in enis]:
        raise Precondition(f"node {NODE}'s {ENIS} ENIs to stay while each has a pod")
    ctx.step("one pod left on each secondary ENI, the others' addresses cooled", **focus)

    last = keep[enis[-1].eni_id]
    ctx.delete_pod(last)
    cooled = time.monotonic() + cooldown
    ctx.step(f"{last.name} ({last.ip}), the last pod on {enis[-1].eni_id}, deleted", **focus)
    # The build's next decrease pass decides: EC2 unchanged for a decrease interval.
    ctx.wait_pool_settles(NODE, timeout=cooldown)
    kept = enis[-1].eni_id in {e.eni_id for e in ctx.node_enis(NODE)}
    ctx.step(f"{enis[-1].eni_id} {'still attached' if kept else 'freed'}", **focus)
    # New pods fill the node until one has the deleted pod's address, the cooldown is over or
    # the node is full: a build that freed the ENI gets its addresses back on a new ENI.
    new = pods_until_reuse(ctx, NODE, last.ip, cooled, ENIS * SLOTS - len(ctx.pods_on(NODE)))
    reused = any(p.ip == last.ip for p in new)
    ctx.step(f"{len(new)} new pods"
             f"{', the last on ' + last.ip if reused else ''}", **focus)
    # The deleted pod's peers send to its address until the cooldown is over: a new pod
    # holding it must be up to answer them (the evidence), so it stays that long.
    ctx.run_for(max(0.0, cooled - time.monotonic()))
    ctx.step("the cooldown is over", **focus)


def _fill(ctx: Ctx) -> list:
    """Pods on node 0 until EC2 shows its ENIS ENIs, each secondary one holding a pod."""
    pods = []
    for _ in range(ENIS * SLOTS):
        if ctx.room(NODE) <= 0:  # the build's max_pods: it holds fewer than ENIS ENIs' worth
            break
        pods.append(ctx.require_pod(NODE, retry_for=max(10.0, ctx.run_seconds(120))))
        enis = ctx.node_enis(NODE)
        used = set(_enis_of(ctx, pods))
        if len(enis) == ENIS and all(e.eni_id in used for e in enis[1:]):
            return pods
    ctx.not_exposed(f"node {NODE}'s build kept its pods on fewer than {ENIS} ENIs: no "
                    "secondary ENI to scale down")


def _enis_of(ctx: Ctx, pods: list) -> list[str | None]:
    """The ENI EC2 gives each pod's address to (the gate's ownership, one snapshot)."""
    owners = ctx.gate.owners().ips
    return [o.eni_id if (o := owners.get(p.ip)) else None for p in pods]
