"""Upstream issue 3887: after a restart, a stale IMDS re-adds IPs EC2 already took back.

IMDS holds the node's ENI stale. The daemon releases IPs (pods deleted, pool over its
target) and another interface of the subnet gets them from EC2. The daemon restarts (an
upgrade, a crash): start-up builds the datastore from IMDS, the released IPs come back as
free and go to new pods, which are then dark: EC2 has given those IPs to that interface.
"""

from __future__ import annotations

import signal
import threading

from cnikit.scenarios.common import settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "restart-stale-imds",
    "upstream 3887: a restart with stale IMDS re-adds IPs EC2 already took back",
    why="both upstream profiles build the datastore from IMDS at start-up; hardened from EC2.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    ctx.spare_interface()  # what takes released addresses: ready before they are released
    pods, eni, focus = settled(ctx, NODE, 5)
    ctx.wait_imds_follows(NODE, eni.eni_id)
    stale = ctx.imds_fault("stale", target={"mac": eni.mac})
    frozen = set(ctx.imds_served(NODE, eni.mac) or []) - {eni.primary_ip}
    ctx.step("IMDS frozen", **focus)

    for pod in pods[:3]:
        ctx.delete_pod(pod)
    ctx.precondition(lambda: len(frozen - set(ctx.ec2_eni(eni.eni_id).ips)) >= 3, 20,
                     "3 IPs released to EC2")
    gone = sorted(frozen - set(ctx.ec2_eni(eni.eni_id).ips))
    ctx.ec2_take(gone)
    ctx.step("IPs released; EC2 gave them to another interface; IMDS still lists them", **focus)

    # The restart (an upgrade, say) comes while pods wait to start, and the runtime retries
    # their ADDs until the daemon answers: they reach it as it comes up. Added one by one
    # after the restart, on a busy machine they came after its first pool pass, which had
    # released the surplus stale addresses by then (vpc-cni-1.18.3 held, once).
    ctx.kill_daemon(NODE, signal.SIGTERM)
    adders = [threading.Thread(target=ctx.add_pod, args=(NODE,), kwargs={"retry_for": 30})
              for _ in range(4)]
    for adder in adders:
        adder.start()
    ctx.restart_daemon(NODE)
    ctx.step("daemon restarted", **focus)
    for adder in adders:
        adder.join(40)
    ctx.step("new pods", **focus)
    ctx.wait_reconciles(NODE, 1)
    ctx.end_imds_fault(stale)
    ctx.step("reconcile; IMDS catches up", **focus)
