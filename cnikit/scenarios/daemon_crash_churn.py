"""The daemon is SIGKILLed at random points (mid-ADD included) while pods churn, and
restarted: the checkpoint must bring back every allocation, none lost or duplicated."""

from __future__ import annotations

import signal
import threading
import time

from cnikit.scenarios.common import peers
from cnikit.scenarios.engine import Ctx, scenario

KILLS = 4


@scenario(
    "daemon-crash-churn",
    "SIGKILL the daemon at random points (mid-ADD too) while pods churn; restart it",
    why="the checkpoint is written before ADD answers and read back at start-up; with IMDS "
        "consistent, start-up from IMDS (upstream) and from EC2 (hardened) agree. A node "
        "is killed only once its last DEL's IP cooldown is over: upstream forgets the "
        "cooldowns across a restart, restart-after-delete's subject, not this one's.",
    nodes=2,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    peers(ctx, node=0, count=2)
    ctx.step("pods up")
    cooldown = ctx.ip_cooldown
    deleted = {0: 0.0, 1: 0.0}  # node -> monotonic time of its last DEL

    def delete(pod) -> None:
        ctx.delete_pod(pod)
        deleted[pod.node.index] = time.monotonic()

    for k in range(KILLS):
        node = ctx.rng.choice([0, 1])
        ctx.run_for(max(0.0, deleted[node] + cooldown - time.monotonic()))
        # A pod being added while the daemon dies: the runtime retries until it restarts.
        adder = threading.Thread(target=ctx.add_pod, args=(node,), kwargs={"retry_for": 20})
        adder.start()
        ctx.run_for(ctx.rng.uniform(0.0, 0.05))
        ctx.kill_daemon(node, signal.SIGKILL)
        for _ in range(2):
            mine = ctx.pods_on(1 - node)
            if mine and ctx.rng.random() < 0.5:
                delete(ctx.rng.choice(mine))
            else:
                ctx.add_pod(1 - node, retry_for=10)
        ctx.restart_daemon(node)
        adder.join(30)
        ctx.step(f"kill {k + 1} of node {node}, restarted")
        mine = ctx.pods_on(node)
        if len(mine) > 3:
            delete(ctx.rng.choice(mine))
    ctx.wait_reconciles(0, 1)
    ctx.step("reconcile after the crashes")
