"""Upstream 1091 across a restart: a pod deleted just before the daemon restarts.

The node's pool is tight (WARM_IP_TARGET=1, one ENI). A pod is deleted and the daemon is
killed at once and restarted; new pods then ask for addresses while the deleted pod's is
still cooling down. Peers on node 1 keep probing the deleted pod for the required cooldown
(IP_COOLDOWN_PERIOD, here 90 s scaled): a new pod given its address sooner answers them,
the `early-reuse` violation, with the flows as evidence.
"""

from __future__ import annotations

import signal
import time

from cnikit.scenarios.common import in_cooldown, pods_until_reuse, settled
from cnikit.scenarios.engine import Ctx, TooSlow, scenario

NODE = 0
CYCLES = 2
ROOM = 6  # new pods per cycle at most: the ENI has room for them (m5.large: 9 secondaries)


@scenario(
    "restart-after-delete",
    "a pod deleted right before the daemon restarts: the next pods must not get its IP "
    "within the IP cooldown",
    why="upstream's checkpoint (vpc-cni-ipam/1) carries the allocations only, so a "
        "restarted aws-node takes every free address as out of cooldown and hands the "
        "deleted pod's on to the next pods at once: early-reuse (1091 across a restart). "
        "Hardened writes the cooldowns into the same checkpoint and recalls them.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1", "IP_COOLDOWN_PERIOD": "90"},
)
def run(ctx: Ctx) -> None:
    pods, _, focus = settled(ctx, NODE, 3)
    ctx.step("a tight pool", **focus)
    cooldown = ctx.ip_cooldown
    in_window = 0
    for cycle in range(CYCLES):
        old = pods.pop(ctx.rng.randrange(len(pods)))
        deleted = time.monotonic()  # as the checker times it: before the DEL is sent
        ctx.delete_pod(old)
        cooled = deleted + cooldown
        ctx.kill_daemon(NODE, signal.SIGKILL)
        ctx.restart_daemon(NODE)
        ctx.step(f"{old.name} ({old.ip}) deleted, daemon killed and restarted", **focus)
        # New pods until one has the deleted pod's address, the cooldown is over or the
        # ENI's room is used: a build that forgot the cooldown reaches the address soon.
        new = pods_until_reuse(ctx, NODE, old.ip, cooled, ROOM)
        in_window += bool(new) and in_cooldown(ctx, deleted, new[0])
        ctx.step(f"cycle {cycle + 1}: {len(new)} new pods within the cooldown"
                 f"{', one on ' + old.ip if any(p.ip == old.ip for p in new) else ''}",
                 **focus)
        # The old pod's peers send to its address until the cooldown is over: a new pod
        # holding it must be up to answer them (the evidence), so it stays that long.
        ctx.run_for(max(0.0, cooled - time.monotonic()))
        # Room for the next cycle: the pool shrinks back once their cooldowns are over.
        for pod in new:
            ctx.delete_pod(pod)
        ctx.wait_within_targets(NODE, timeout=cooldown + 15)
    ctx.wait_reconciles(NODE, 1)
    ctx.step("reconcile", **focus)
    if not in_window:
        # The restart took the whole cooldown: a build that forgets it would have passed.
        raise TooSlow(f"no new pod came within the IP cooldown ({cooldown:.2f}s) of a "
                      f"delete and the daemon's restart, in {CYCLES} cycles")
