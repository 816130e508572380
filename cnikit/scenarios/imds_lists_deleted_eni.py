"""Upstream issues 1008 and 1340: IMDS lists an ENI EC2 deleted, and start-up aborts on it.

After an ENI was detached and deleted, IMDS went on listing it until the instance's next
attach or detach (AWS support: a known IMDS defect, upstream #2497). A daemon that started
meanwhile called EC2 on every ENI IMDS listed, got InvalidNetworkInterfaceID.NotFound and
aborted: CrashLoopBackOff, and no pod on the node could start until the next change
(fixes #1011, #1341 skip such an ENI).

The node's daemon is down (a reboot, an upgrade); a secondary ENI of the node that holds no
pod is detached and deleted out of band while IMDS keeps listing it (`stale-until-change`
surviving that detach); the daemon restarts and must come up and serve pods.
"""

from __future__ import annotations

import signal

from cnikit.scenarios.common import settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "imds-lists-deleted-eni",
    "upstream 1008/1340: a restart while IMDS still lists an ENI EC2 deleted",
    why="upstream #1008/#1340 (IMDS defect #2497): start-up that calls EC2 on each ENI IMDS "
        "lists must skip one EC2 deleted, not abort (fixes #1011/#1341). Both upstream "
        "releases modelled have those fixes and so does hardened: a guard for every profile.",
    nodes=2,
)
def run(ctx: Ctx) -> None:
    _pods, _eni, focus = settled(ctx, NODE, 2)

    def empty_secondary():
        held = ctx.pod_ips(NODE)
        return [e for e in ctx.node_enis(NODE)
                if e.device_index and not held & set(e.ips) and not e.prefixes]

    if not ctx.design(empty_secondary, 20, "a secondary ENI that holds no pod"):
        ctx.not_exposed("the node has no secondary ENI without pods: none to delete while "
                        "the build's pods stay whole")
    eni = empty_secondary()[0]
    focus = {**focus, "eni": eni.eni_id, "mac": eni.mac}
    ctx.wait_imds_follows(NODE, eni.eni_id)
    ctx.step("a secondary ENI without pods, listed by IMDS", **focus)

    ctx.kill_daemon(NODE, signal.SIGKILL)  # a reboot: nothing of the daemon runs meanwhile
    sticky = ctx.imds_fault("stale-until-change",
                            target={"instance_id": ctx.instance_id(NODE)}, missed_changes=1)
    ctx.nemesis.imds.follow_end(sticky, 300)  # its end recorded when it happens
    ctx.delete_eni(eni.eni_id)
    ctx.precondition(lambda: ctx.ec2_eni(eni.eni_id) is None
                     and ctx.imds_served(NODE, eni.mac) is not None, 10,
                     "EC2 without the ENI while IMDS still lists it")
    ctx.step("daemon down; ENI detached and deleted; IMDS still lists it", **focus)

    ctx.restart_daemon(NODE)  # not ready in time: liveness
    ctx.step("daemon restarted", **focus)
    for _ in range(2):
        ctx.require_pod(NODE, retry_for=30)
    ctx.step("new pods served", **focus)

    # The fault ends by itself at the node's next attach or detach (a build that attaches
    # a new warm ENI ends it); else here.
    ctx.end_imds_fault(sticky)
    ctx.step("IMDS follows EC2 again", **focus)
