"""EC2 hands an address the node just released back to the node's own next Assign.

The pool releases a free address; right after, the node needs one and EC2 gives it the
lowest free address of the subnet: the one it just released. A pod takes it while IMDS
does not list it yet (IMDS is a moment behind every assign). A reconcile inside the
reconcile cooldown then sees IMDS and the datastore differ, asks EC2, and meets the
address among those the node "recently freed". A build that skips such addresses, as if
the release were still the last word, sweeps it from its datastore under the pod holding
it, takes it back as free once the cooldown ends and gives it to a second pod (or
releases it under the first).

Seen first in a CI run of ec2-throttle-storm, where the storm's churn reached it by chance.
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import ec2_call_times, pods_until_reuse, release, settled
from cnikit.scenarios.engine import Ctx, Precondition, scenario

NODE = 0
ATTEMPTS = 3
# The build decides a moment after its read of IMDS ends (it asks EC2 first): a pass that
# ends this close to the cooldown's end may decide outside it.
MARGIN_S = 0.5


@scenario(
    "released-address-comes-back",
    "EC2 gives a just-released address back to the node's next Assign, IMDS a moment behind",
    why="both upstream profiles keep a released address in the reconcile cooldown after "
        "their own Assign got it back (verifyAndAddIPsToDatastore skips it as recently "
        "freed), so the reconcile sweeps it from the datastore under its pod and re-adds it "
        "as free once the cooldown ends: a second pod gets it; hardened settles a release "
        "the node's own Assign undid, and takes nothing away that EC2 still shows.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    pods, eni, focus = settled(ctx, NODE, 3)
    ctx.step("3 pods and one warm address; EC2, IMDS and the pool agree", **focus)

    # The bug needs a reconcile pass between the pod's ADD and the end of the release's
    # reconcile cooldown (t(60) after it): a busy machine can stretch the release, the
    # Assign and the ADD past the next pass, and then that pass decides nothing. So the
    # pass's time is checked, and a cycle that missed the window is made again.
    for _ in range(ATTEMPTS):
        given = _given_back(ctx, eni, focus)
        if given is not None:
            break
        ctx.step("that reconcile came after the release's cooldown (a busy machine); "
                 "again", **focus)
    else:
        raise Precondition(f"a reconcile inside a release's cooldown, in {ATTEMPTS} tries")
    gone, left_at = given

    # Past the cooldown: a build that swept the address takes it back as free now.
    ctx.run_for(max(0.0, left_at + ctx.run_seconds(60) + 0.5 - time.monotonic()))
    ctx.wait_reconciles(NODE, 1)
    reused = pods_until_reuse(ctx, NODE, gone, time.monotonic() + max(5.0, ctx.run_seconds(60)), room=3)
    ctx.step(f"the cooldown is over; {len(reused)} new pod(s)", **focus)
    ctx.wait_reconciles(NODE, 1)


def _given_back(ctx: Ctx, eni, focus: dict) -> tuple[str, float] | None:
    """The pool releases an address, EC2 gives it back to a pod of the node, a reconcile
    follows: (the address, when it left) if that reconcile fell inside the release's
    cooldown, else None."""
    # Right after a reconcile pass, so that the release and the address's return both fall
    # well inside the next pass's reconcile cooldown (60 s upstream, like the interval).
    ctx.wait_reconciles(NODE, 1)
    released = release(ctx, eni, ctx.pods_on(NODE)[:1], 1, within=max(10.0, ctx.run_seconds(120)))
    if not released:
        ctx.not_exposed(f"node {NODE} released no address to EC2 for it to give back")
    gone = released[0]
    left_at = time.monotonic()
    freed_at = max(ec2_call_times(ctx, ("UnassignPrivateIpAddresses",), ip=gone, ok_only=True),
                   default=time.time())
    behind = ctx.imds_fault("missing", target={"mac": eni.mac, "ips": [gone]},
                            duration=ctx.run_seconds(240))
    ctx.step(f"the pool released {gone}; IMDS will not list it for a while", **focus)

    # The next pods use up the warm address; the node asks EC2 for one and gets `gone` back
    # (EC2 hands out the lowest free address first). A correct build need not release the
    # lowest address, nor EC2 give it back: then the run cannot go on (Precondition).
    holder = None
    for _ in range(4):
        pod = ctx.add_pod(NODE, retry_for=max(5.0, ctx.run_seconds(60)))
        if pod is not None and pod.ip == gone:
            holder = pod
            break
    if holder is None:
        raise Precondition(f"EC2 giving {gone} back to node {NODE} and a pod getting it")
    ctx.step(f"EC2 gave {gone} back to the node; pod {holder.name} has it, IMDS does not "
             "list it", **focus)

    passed = ctx.wait_reconciles(NODE, 1)
    ctx.end_imds_fault(behind)
    if passed + MARGIN_S >= freed_at + ctx.run_seconds(60):
        return None
    ctx.step("a reconcile inside the cooldown; IMDS caught up", **focus)
    return gone, left_at
