"""Upstream issue 3887: after a restart, a stale IMDS re-adds IPs EC2 already took back.

IMDS holds the node's ENI stale. The daemon releases IPs (pods deleted, pool over its
target) and another interface of the subnet gets them from EC2. The daemon restarts (an
upgrade, a crash): start-up builds the datastore from IMDS, the released IPs come back as
free and go to new pods, which are then dark: EC2 has given those IPs to that interface.
"""

from __future__ import annotations

import signal
import threading
import time

from cnikit.scenarios.common import ec2_call_times, settled
from cnikit.scenarios.engine import Ctx, Precondition, scenario

NODE = 0
ATTEMPTS = 3
ADD_RETRY_S = 30.0
RELEASES = ("UnassignPrivateIpAddresses", "DetachNetworkInterface")  # addresses and prefixes


@scenario(
    "restart-stale-imds",
    "upstream 3887: a restart with stale IMDS re-adds IPs EC2 already took back",
    why="both upstream profiles build the datastore from IMDS at start-up; hardened from EC2.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    ctx.spare_interface()  # what takes released addresses: ready before they are released
    _pods, eni, focus = settled(ctx, NODE, 5)
    # The new pods must reach the restarted daemon before its first pool pass, which
    # releases the surplus addresses, stale ones included (a build that trusted IMDS then
    # meets EC2's refusal instead of a pod). A busy machine can lose that race (vpc-cni-1.18.3
    # and 1.18.4 each held once at ten test workers): then the cycle is made again.
    for _ in range(ATTEMPTS):
        stale, in_time = _restart_with_stale_imds(ctx, eni, focus)
        if in_time:
            break
        ctx.end_imds_fault(stale)
        ctx.step("the daemon's first pool pass came before the pods (a busy machine); again",
                 **focus)
    else:
        raise Precondition(f"the pods in before the restarted daemon's first release, in "
                           f"{ATTEMPTS} tries")
    ctx.wait_reconciles(NODE, 1)
    ctx.end_imds_fault(stale)
    ctx.step("reconcile; IMDS catches up", **focus)


def _restart_with_stale_imds(ctx: Ctx, eni, focus: dict) -> tuple[str, bool]:
    """IMDS frozen, three addresses released and taken elsewhere, the daemon restarted with
    four pods waiting: (the stale fault, whether every pod was in before the build's first
    release call after the restart)."""
    ctx.wait_imds_follows(NODE, eni.eni_id)
    stale = ctx.imds_fault("stale", target={"mac": eni.mac})
    frozen = set(ctx.imds_served(NODE, eni.mac) or []) - {eni.primary_ip}
    ctx.step("IMDS frozen", **focus)

    for pod in ctx.pods_on(NODE)[:3]:
        ctx.delete_pod(pod)
    ctx.design(lambda: len(frozen - set(ctx.ec2_eni(eni.eni_id).ips)) >= 3, 20,
               "3 IPs released to EC2")
    gone = sorted(frozen - set(ctx.ec2_eni(eni.eni_id).ips))
    ctx.ec2_take(gone)
    ctx.step("IPs released; EC2 gave them to another interface; IMDS still lists them", **focus)

    # The restart (an upgrade, say) comes while pods wait to start, and the runtime retries
    # their ADDs until the daemon answers: they reach it as it comes up.
    restarted = time.time()
    ctx.kill_daemon(NODE, signal.SIGTERM)
    added: list[float] = []
    errors: list[BaseException] = []

    def add() -> None:
        try:
            if ctx.add_pod(NODE, retry_for=ADD_RETRY_S) is not None:
                added.append(time.time())
        except BaseException as e:  # noqa: BLE001 - re-raised in the scenario's thread
            errors.append(e)

    adders = [threading.Thread(target=add, name=f"pending-pod-{i}") for i in range(4)]
    for adder in adders:
        adder.start()
    try:
        ctx.restart_daemon(NODE)
        ctx.step("daemon restarted", **focus)
    finally:
        # No adder outlives its try: the next one measures the pool without a stray pod.
        for adder in adders:
            adder.join(ADD_RETRY_S + 10)
    if errors:
        raise errors[0]
    if any(adder.is_alive() for adder in adders):
        raise RuntimeError(f"a pod ADD still running {ADD_RETRY_S + 10:g}s after its deadline")
    ctx.step(f"{len(added)} new pods", **focus)
    releases = ec2_call_times(ctx, RELEASES, eni_id=eni.eni_id, since=restarted)
    return stale, not releases or (len(added) == len(adders) and max(added) < min(releases))
