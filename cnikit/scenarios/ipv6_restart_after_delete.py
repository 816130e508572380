"""Upstream 1091 across a restart, in IPv6 mode: a pod deleted just before the daemon
restarts.

Upstream's IPv6 datastore picks a pod's address as its IPv4 one does: a released address
out of its cooldown first, else the next free one up from the /80's base. Its checkpoint
carries the allocations only, so a restarted aws-node knows nothing of the address a pod
gave back a moment before: that address is a hole below the others, the next pod gets it
at once, and the deleted pod's peers, still sending to it within IP_COOLDOWN_PERIOD, reach
the new pod (`early-reuse`). Hardened writes the cooldowns into the same checkpoint and
recalls them.
"""

from __future__ import annotations

import signal
import time

from cnikit.scenarios.common import fill, in_cooldown, peers, pods_until_reuse
from cnikit.scenarios.engine import Ctx, TooSlow, scenario

NODE = 0
CYCLES = 2
ROOM = 4  # new pods per cycle at most


@scenario(
    "ipv6-restart-after-delete",
    "IPv6 mode: a pod deleted right before the daemon restarts; the next pods must not get "
    "its address within the IP cooldown",
    why="upstream's checkpoint carries the allocations only, in IPv6 mode as in IPv4: a "
        "restarted aws-node (1.18.x, 1.20.4) hands the deleted pod's address, the lowest "
        "free one of the /80, to the next pod at once: early-reuse. Hardened recalls the "
        "cooldowns from its checkpoint.",
    nodes=2,
    env={"IP_COOLDOWN_PERIOD": "60"},
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    pods = fill(ctx, NODE, 3)
    ctx.step("3 pods on node 0, 2 peers on node 1", node=NODE)
    cooldown = ctx.ip_cooldown
    in_window = 0
    for cycle in range(CYCLES):
        # The lowest address: a build that forgets the cooldown and counts up from the
        # prefix's base fills that hole first.
        old = min(pods, key=lambda p: int.from_bytes(_packed(p.ip), "big"))
        pods.remove(old)
        deleted = time.monotonic()  # as the checker times it: before the DEL is sent
        ctx.delete_pod(old)
        cooled = deleted + cooldown
        ctx.kill_daemon(NODE, signal.SIGKILL)
        ctx.restart_daemon(NODE)
        ctx.step(f"{old.name} ({old.ip}) deleted, daemon killed and restarted", node=NODE)
        new = pods_until_reuse(ctx, NODE, old.ip, cooled, ROOM)
        in_window += bool(new) and in_cooldown(ctx, deleted, new[0])
        ctx.step(f"cycle {cycle + 1}: {len(new)} new pods within the cooldown"
                 f"{', one on ' + old.ip if any(p.ip == old.ip for p in new) else ''}",
                 node=NODE)
        # The old pod's peers send to its address until the cooldown is over: a new pod
        # holding it stays up to answer them (the evidence).
        ctx.run_for(max(0.0, cooled - time.monotonic()))
        pods += new
    if not in_window:
        raise TooSlow(f"no new pod came within the IP cooldown ({cooldown:.2f}s) of a "
                      f"delete and the daemon's restart, in {CYCLES} cycles")


def _packed(ip: str) -> bytes:
    import ipaddress

    return ipaddress.ip_address(ip).packed
