"""Upstream issue 1091 in IPv6 mode: a freed IPv6 address handed to the next pod too soon.

IPv6 mode has no warm pool to run short of: the node's /80 holds more addresses than it
will ever have pods. The cooldown still decides: upstream's getUnusedIP hands a released
address on first once it is out of IP_COOLDOWN_PERIOD, else the next unused one of the /80.
A build without the cooldown (or one that takes a freed address first, cooling or not)
gives the next pod the address of the pod deleted just before it.

Pods on node 0 are deleted and re-created back to back, the runtime repeating each old
DEL after the new pod is up. Peers on both nodes probe every pod throughout and keep their
flows to a deleted pod going for the required cooldown (30 s upstream, scaled): a new pod
given the address sooner answers them (`early-reuse`, cnikit.check.checkers.early_reuse).
Once the cooldowns are over, new pods come until one is given a deleted pod's address
(what the cooldown allows), and that old pod's DEL is replayed once more: a DEL that frees
by address, not by sandbox, would free the live pod's (the next pod then shares it).
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import fill, in_cooldown, peers
from cnikit.scenarios.engine import Ctx, TooSlow, scenario

NODE = 0
CYCLES = 8
ROOM = 10  # pods added after the cooldowns, at most, until one reuses an old address


@scenario(
    "ipv6-ip-reuse-cooldown",
    "upstream 1091 in IPv6 mode: pods deleted and re-created back to back (IP cooldown)",
    why="upstream's IPv6 getUnusedIP skips a released address until IP_COOLDOWN_PERIOD "
        "(30 s) is over and takes the next unused one of the /80: every profile holds. A "
        "build without it hands the deleted pod's address to the next pod, whose old peers "
        "reach it: early-reuse. DEL is keyed by container ID, so a replayed DEL frees "
        "nothing a new pod holds.",
    nodes=2,
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    pods = fill(ctx, NODE, 3)
    ctx.step("3 pods on node 0, 2 peers on node 1", node=NODE)
    cooldown = ctx.ip_cooldown
    deleted_pods: list = []
    last_delete = 0.0
    reused = in_window = 0
    for _ in range(CYCLES):
        old = ctx.rng.choice(pods)
        pods.remove(old)
        last_delete = time.monotonic()  # as the checker times it: before the DEL is sent
        ctx.delete_pod(old)
        deleted_pods.append(old)
        new = ctx.add_pod(NODE, retry_for=ctx.run_seconds(30) + 5)
        if new is not None:
            pods.append(new)
            reused += new.ip in {p.ip for p in deleted_pods}
            # The scenario tests anything only when a pod can come inside the cooldown.
            in_window += in_cooldown(ctx, last_delete, new)
        # The runtime's retried DEL of the old sandbox, with its old prevResult: it must
        # succeed and free nothing (cnikit.check.checkers.runtime_retries).
        ctx.replay_delete(old)
    ctx.step(f"{CYCLES} delete/add cycles ({reused} reused an address)", node=NODE)
    if not in_window:
        # No ADD came back within the cooldown of its DEL: a build with no cooldown at all
        # would have passed too. A violation found meanwhile still stands (it outranks this).
        raise TooSlow(f"no pod came within the IP cooldown ({cooldown:.2f}s) of a delete, "
                      f"in {CYCLES} cycles")

    # The cooldowns over, a released address may go to a new pod (a build may also keep
    # taking fresh ones from its /80: then no reuse is seen, and none is required).
    ctx.run_for(max(0.0, last_delete + cooldown - time.monotonic()))
    old_ips = {p.ip: p for p in deleted_pods}
    got = None
    for _ in range(ROOM):
        pod = ctx.require_pod(NODE)
        if pod.ip in old_ips:
            got = pod
            break
    if got is None:
        ctx.adapt(f"no new pod got a deleted pod's address in {ROOM} pods after the "
                  "cooldowns: the build hands out fresh ones")
        return
    ctx.step(f"after the cooldowns {got.name} got {got.ip}, a deleted pod's", node=NODE)
    # That old pod's DEL again: it must free nothing of the new pod's. The next pods
    # would be given the address of a build that freed it (shared-ip).
    ctx.replay_delete(old_ips[got.ip])
    # A build that freed it put it in its cooldown: once that is over, it is among the
    # released addresses the next pods get first (shared-ip with the live pod).
    ctx.run_for(cooldown)
    again = []
    for _ in range(len(old_ips)):
        again.append(ctx.require_pod(NODE))
        if again[-1].ip == got.ip:
            break
    ctx.step(f"the old DEL replayed; {len(again)} new pods after its cooldown", node=NODE)
