"""EC2 throttles half of all calls (RequestLimitExceeded) while pods churn on every node.

Then, still throttled, each node takes more pods than one ENI holds (the build attaches an
ENI) and drops back to two (it frees one: detach and delete), with DescribeNetworkInterfaces
throttled harder meanwhile. A build that reads a throttled Describe as "the ENI is gone"
forgets an ENI it is freeing: detached and never deleted (`eni-leak`, judged once the run
has gone on past its grace), or still attached with its addresses nobody's.
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import churn, peers
from cnikit.scenarios.engine import Ctx, scenario

NODES = (0, 1)


@scenario(
    "ec2-throttle-storm",
    "RequestLimitExceeded on half the EC2 calls while pods churn, and an ENI attached and "
    "freed on each node under it",
    why="a throttled call changes nothing: assign/attach fail and are retried, the reconcile "
        "aborts when EC2 fails; pods may wait for an IP (ADD retried), none loses one. A "
        "throttled Describe while an ENI is freed is an error to retry, never 'not found' "
        "(upstream's freeENI returns it and the ENI is taken back or deleted later): every "
        "ENI a node freed is deleted.",
    nodes=2,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    kept = {n: peers(ctx, node=n, count=2) for n in (1, 0)}
    fid = ctx.ec2_fault("throttle", probability=0.5)
    ctx.step("EC2 throttles half the calls")
    churn(ctx, list(NODES), cycles=24, max_pods=10, retry_for=15)
    ctx.wait_reconciles(0, 1)
    ctx.step("churn done; a reconcile under throttling")
    added = {n: _past_one_eni(ctx, n) for n in NODES}
    describe = ctx.ec2_fault("throttle", target={"action": "DescribeNetworkInterfaces"},
                             probability=0.5)
    for n in NODES:
        _back_to(ctx, n, kept[n])
    ctx.step("pods gone from the new ENIs; Describe throttled harder", node=0)
    _freed(ctx, {e for enis in added.values() for e in enis})
    ctx.end_ec2_fault(describe)
    ctx.end_ec2_fault(fid)
    for n in NODES:
        ctx.wait_within_targets(n, 20)
    ctx.step("storm over, pools within targets")


def _past_one_eni(ctx: Ctx, node: int) -> set[str]:
    """Pods on `node` until it runs more than one ENI holds: the build attaches another
    under throttling. The ENIs it then has beyond its first (none: a build that needed no
    new ENI, a design the scenario goes on without)."""
    want = min(ctx.eni_capacity + 2, ctx.max_pods)
    while len(ctx.pods_on(node)) < want and ctx.add_pod(node, retry_for=15) is not None:
        pass
    ctx.design(lambda: len(ctx.node_enis(node)) > 1, 15, f"node {node} attached another ENI")
    enis = [e.eni_id for e in ctx.node_enis(node)]
    ctx.step(f"{len(ctx.pods_on(node))} pods on node {node}, on {len(enis)} ENIs", node=node)
    return set(enis[1:])


def _back_to(ctx: Ctx, node: int, kept: list) -> None:
    """Every pod of `node` deleted but `kept` ones on its first ENI: the ENIs beyond it
    are left with none, for the build to free."""
    first = set(ctx.node_enis(node)[0].ips)
    stay = {p.name for p in kept if p.ip in first}
    for pod in ctx.pods_on(node):
        if pod.name not in stay:
            ctx.delete_pod(pod)


def _freed(ctx: Ctx, enis: set[str]) -> None:
    """Wait until every ENI in `enis` is deleted in EC2, or one has been left available past
    the eni-leak checker's grace (a build that forgot it: the checker judges it at the
    end), or none has changed for three reconcile intervals while none is available: a
    build may keep a drained ENI for its warm pool (a design, not a leak)."""
    if not enis:
        return
    leak = ctx.watch.invariants.checkers.get("eni-leak")
    grace = getattr(leak, "grace", ctx.run_seconds(360)) + 1.0
    quiet = max(3.0, ctx.run_seconds(180))
    loose: dict[str, float] = {}
    seen: dict[str, str] = {}
    changed = [time.monotonic()]

    def settled() -> bool:
        now, known = time.monotonic(), ctx.gate.owners().enis
        for e in enis:
            state = ("deleted" if e not in known else "available"
                     if known[e].instance_id is None else known[e].attachment_status or "")
            if seen.get(e) != state:
                seen[e] = state
                changed[0] = now
            if state == "available":
                loose.setdefault(e, now)
            else:
                loose.pop(e, None)
        return (not enis & known.keys() or any(now - t > grace for t in loose.values())
                or (not loose and now - changed[0] > quiet))

    ctx.design(settled, grace + max(15.0, ctx.run_seconds(300)),
               f"the new ENIs {sorted(enis)} freed or kept")
    ctx.step(f"the new ENIs: {sum(v == 'deleted' for v in seen.values())} deleted, "
             f"{len(loose)} left available, {sum(v not in ('deleted', 'available') for v in seen.values())} "
             "attached")
