"""IPv6 mode across daemon crashes: SIGKILLed with an ADD in flight, and killed inside a
write of its state, then restarted; its pods must keep their addresses.

In IPv6 mode upstream's datastore holds the node's /80 and the pods' addresses in it; a
restart takes the /80 from EC2 again and the pods from the checkpoint (rows with `ipv6`).
A build that loses a pod's row, or restores the /80 without its pods, hands a running
pod's address to the next pod (`shared-ip`); one that takes a new /80 or releases the old
one leaves its pods dark (`ip-not-owned`, `unreachable`). A checkpoint rewritten in place
(truncate, then write) is left empty by a kill in the write: the daemon cannot start again
(`liveness`) or starts without its pods.

Node 0's daemon is SIGKILLed twice while an ADD is in flight (the runtime retries it until
the daemon is back) and pods on node 1 come and go meanwhile; then twice the nemesis's
write trap kills it the moment it opens a file of its state directory for writing, for an
ADD. Each time it is restarted and the ADD in flight completes. Then pods come and go on
node 0. A node is killed only once its last DEL's IP cooldown is over: upstream forgets the
cooldowns across a restart, and that is a subject of its own (restart-after-delete).
"""

from __future__ import annotations

import signal
import threading
import time

from cnikit.scenarios.common import fill, kill_in_write_of_an_add, peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
KILLS = 2
WRITE_KILLS = 2


@scenario(
    "ipv6-restart-keeps-pods",
    "IPv6 mode: the daemon SIGKILLed mid-ADD and killed inside a checkpoint write, "
    "restarted, more pods",
    why="every profile's IPv6 start-up takes the /80 from EC2 again and its pods from a "
        "checkpoint written to a temp file and renamed, so a kill at any moment leaves the "
        "old or the new one: no pod loses its address or shares it. A build that forgets "
        "its pods, takes another /80, or rewrites its checkpoint in place fails "
        "(shared-ip, ip-not-owned, liveness).",
    nodes=2,
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    fill(ctx, NODE, 3)
    ctx.step("3 pods on node 0, 2 peers on node 1", node=NODE)
    cooldown = ctx.ip_cooldown
    deleted = {0: 0.0, 1: 0.0}  # node -> monotonic time of its last DEL

    def delete(pod) -> None:
        ctx.delete_pod(pod)
        deleted[pod.node.index] = time.monotonic()

    for k in range(KILLS):
        ctx.run_for(max(0.0, deleted[NODE] + cooldown - time.monotonic()))
        # A pod being added while the daemon dies: the runtime retries until it restarts.
        adder = threading.Thread(target=ctx.add_pod, args=(NODE,), kwargs={"retry_for": 30})
        adder.start()
        ctx.run_for(ctx.rng.uniform(0.0, 0.05))
        ctx.kill_daemon(NODE, signal.SIGKILL)
        for _ in range(2):  # the other node goes on meanwhile
            mine = ctx.pods_on(1)
            if len(mine) > 2 and ctx.rng.random() < 0.5:
                delete(ctx.rng.choice(mine))
            else:
                ctx.add_pod(1, retry_for=10)
        ctx.restart_daemon(NODE)
        adder.join(40)
        ctx.step(f"kill {k + 1}: SIGKILL with an ADD in flight, restarted", node=NODE)

    for k in range(WRITE_KILLS):
        adder, fired = kill_in_write_of_an_add(ctx, NODE)
        if fired is None:  # a build that keeps no state on disk: nothing to kill it in
            break
        ctx.step(f"kill in write {k + 1}: killed opening "
                 f"{fired.get('path', '?').rsplit('/', 1)[-1]} for writing", node=NODE)
        ctx.restart_daemon(NODE)
        adder.join(40)
        ctx.step(f"kill in write {k + 1}: restarted, the ADD retried", node=NODE)

    # The restored pods keep their addresses: new ones get others, the old pods answer.
    for pod in ctx.pods_on(NODE)[:2]:
        delete(pod)
    for _ in range(3):
        ctx.require_pod(NODE)
    ctx.step("pods deleted and added after the crashes", node=NODE)
