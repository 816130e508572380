"""Another principal of the account acts on the node's EC2 resources out of band (upstream
1099, 377/391): an operator unassigns free addresses of the node's ENI from the console,
then, while pods come in a burst that makes the node grow, another node's leaked-ENI sweep
deletes every "available" ENI carrying the cluster's tag, the node's new ENI included when
it is caught between create and attach.

EC2 is the truth: an address it no longer gives the node must not reach a new pod (the pod
would be dark: EC2 routes it nowhere), and an ENI deleted under the build is not the build's.
A build that keeps the unassigned address in its pool hands it out (ip-not-owned); one that
takes a swept ENI for attached, or gives up growing, leaves the burst's pods without
addresses (liveness).
"""

from __future__ import annotations

import threading

from cnikit.scenarios.common import settled, warm_addresses
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
BURST = 8  # pods after the unassign: past the free addresses, the node must grow an ENI
SWEEP_EVERY = 0.2  # seconds between two sweeps while the burst runs
ATTACH_MS = 1000  # how long EC2 takes to attach an ENI meanwhile


@scenario(
    "other-actor-sweeps-eni",
    "another principal unassigns free addresses and sweeps available ENIs during a burst",
    why="upstream 1099 (fix 1109): another node's leaked-ENI sweep deleted an ENI a node had "
        "just created and not yet attached; upstream 377/391: an address unassigned from the "
        "console stayed in IMDS and the datastore and was given to a pod. EC2 answers for "
        "both: the build must not hand out what EC2 no longer gives it, and keeps growing.",
    nodes=2,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    pods, eni, focus = settled(ctx, NODE, 3)
    ctx.step("3 pods; EC2 and the pool agree", **focus)

    warm = warm_addresses(ctx, NODE, eni)
    for ip in warm:
        ctx.nemesis.unassign(ip, other=True)
    ctx.step(f"another principal unassigns the free {', '.join(warm)} out of band", **focus)
    ctx.wait_reconciles(NODE, 2)
    ctx.step("2 reconcile passes", **focus)

    # An attach takes a moment on EC2 (here a second): the window upstream 1099's sweep hit.
    slow = ctx.ec2_fault("latency", target={"action": "AttachNetworkInterface"},
                         ms=ATTACH_MS)
    stop = threading.Event()
    swept: list[str] = []

    def sweeper() -> None:
        # Sweeps until one caught an ENI between create and attach, or the burst is over.
        while not stop.is_set() and not swept:
            try:
                swept.extend(ctx.sweep_enis())
            except Exception:  # noqa: BLE001 - recorded as a failed act by the nemesis
                pass
            stop.wait(SWEEP_EVERY)
        ctx.end_ec2_fault(slow)

    t = threading.Thread(target=sweeper, name="other-principal-sweep", daemon=True)
    t.start()
    try:
        for _ in range(min(BURST, ctx.room(NODE))):
            ctx.add_pod(NODE, retry_for=max(10.0, ctx.run_seconds(60)))
    finally:
        stop.set()
        t.join(10)
    ctx.step(f"a burst of pods while attaches take {ATTACH_MS} ms and another principal "
             f"sweeps available ENIs (swept: {', '.join(swept) or 'none'})", **focus)
    ctx.wait_reconciles(NODE, 1)
    if ctx.room(NODE) > 0:
        ctx.require_pod(NODE, retry_for=max(15.0, ctx.run_seconds(60)))
    ctx.step("sweeps over; a new pod", **focus)
