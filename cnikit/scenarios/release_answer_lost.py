"""EC2 releases a node's addresses, but its answers are lost; the retries are refused.

Node 0 releases two warm addresses while every UnassignPrivateIpAddresses answer is lost
(`lost-response`: EC2 made the change, the caller sees InternalError). The daemon's EC2
client retries, and EC2 refuses the retry (InvalidParameterValue: the addresses are no
longer on the ENI). Another interface of the subnet takes them as soon as EC2 frees them,
before the daemon hears the (lost) answer. New pods come on
node 0: a build that put a refused release back into its pool as free gives one of them an
address EC2 gave to someone else (`ip-not-owned`, `unreachable`): random-chaos seed 22's
second hardened bug.
"""

from __future__ import annotations

from cnikit.scenarios.common import release, settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
RELEASED = 2


@scenario(
    "release-answer-lost",
    "EC2 releases a node's addresses but the answers are lost; the retries are refused",
    why="a refused release says nothing about where the address is: upstream takes it out "
        "of the datastore into the reconcile cooldown and re-adds only what EC2 still "
        "shows; hardened keeps it quarantined until EC2 and IMDS agree. A build that puts "
        "it back in the pool as free hands a new pod an address another interface has.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    ctx.spare_interface()  # what takes released addresses: ready before they are released
    pods, eni, focus = settled(ctx, NODE, 4)
    ctx.step("4 pods; EC2, IMDS and the pool agree", **focus)
    fault = ctx.ec2_fault("lost-response", target={"action": "UnassignPrivateIpAddresses"})
    # Taken the moment EC2 frees them: whenever the daemon retries, EC2 refuses (the
    # addresses are no longer on the ENI), and it cannot assign them again first.
    with ctx.take_released(eni.eni_id) as taker:
        released = release(ctx, eni, pods[:RELEASED], RELEASED)
        taken = taker.close(expect=released)
    ctx.step(f"{', '.join(released)} released with the answers lost; {len(taken)} taken by "
             "another interface", **focus)
    for _ in range(3):
        ctx.add_pod(NODE, retry_for=5)
    ctx.end_ec2_fault(fault)
    ctx.step("3 new pods on node 0; answers no longer lost", **focus)
    ctx.wait_reconciles(NODE, 2)
    ctx.step("2 reconciles", **focus)
