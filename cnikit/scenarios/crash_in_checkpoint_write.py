"""The daemon dies inside a write of its state: killed the moment it opens a file of its
state directory for writing, before it wrote a byte (cnikit.cluster.write_trap).

Three times, on node 0: the trap is armed, a pod is added (its ADD makes the daemon write
its checkpoint), the daemon dies in that write, is restarted, and the runtime's retried ADD
completes. A build that writes its checkpoint in place (truncate, then write) leaves it
empty or torn: it cannot start again (`liveness`) or starts without its pods and hands their
addresses to new ones (`shared-ip`). One that writes a new file and renames it over the old
one loses only the unfinished ADD, which the runtime retries.
"""

from __future__ import annotations

from cnikit.scenarios.common import fill, kill_in_write_of_an_add, peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
CRASHES = 3


@scenario(
    "crash-in-checkpoint-write",
    "the daemon is killed inside a write of its state (as it opens the file), then restarted",
    why="every profile writes ipam.json to a temp file, fsyncs it and renames it over the "
        "old one, so a crash at any moment leaves the old or the new checkpoint, never a "
        "torn one. A build that rewrites it in place cannot start again after this crash, or "
        "starts without its pods.",
    nodes=2,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    pods = fill(ctx, NODE, 3)
    ctx.wait_within_targets(NODE)
    ctx.step("3 pods on node 0")
    for k in range(CRASHES):
        adder, fired = kill_in_write_of_an_add(ctx, NODE)
        if fired is None:
            ctx.not_exposed("the build's daemon wrote nothing in its state directory for an "
                            "ADD: no write to crash in")
        ctx.step(f"crash {k + 1}: killed opening {fired.get('path', '?').rsplit('/', 1)[-1]} "
                 "for writing")
        ctx.restart_daemon(NODE)
        adder.join(40)
        ctx.step(f"crash {k + 1}: restarted, the ADD retried")
    for pod in pods[:2]:
        ctx.delete_pod(pod)
    for _ in range(2):
        ctx.require_pod(NODE)
    ctx.wait_reconciles(NODE, 1)
    ctx.step("pods deleted and added after the crashes; a reconcile")
