"""Upstream issue 1091: a freed IP handed to the next pod too soon.

A tight pool (WARM_IP_TARGET=1, one ENI) and pods deleted and re-created back to back, so
the next pod wants an IP while the last one's is still cooling down. The runtime repeats
the DEL of the old sandbox after the new pod is up (kubelet retries DELs), which must not
free the IP a new pod may now hold. Peers on both nodes probe every pod throughout, and
keep their flows to a deleted pod going for the required cooldown (upstream's
IP_COOLDOWN_PERIOD, 30 s, scaled): a new pod given the address sooner answers them, which is
the `early-reuse` violation (cnikit.check.checkers.early_reuse), evidence included.
Before the cycles, every pod goes at once and as many come: while their addresses cool down
the ENI still has room, and a pod that waits the cooldown out for an address is
`cooldown-wait` (upstream #1700, #2896: a pool that counts cooling addresses as available
does not grow).
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import in_cooldown, settled
from cnikit.scenarios.engine import Ctx, TooSlow, scenario

NODE = 0
CYCLES = 12


@scenario(
    "ip-reuse-cooldown",
    "upstream 1091: delete and re-create pods back to back on a tight pool (IP cooldown)",
    why="IP_COOLDOWN_PERIOD (30 s) is in every upstream release since 1.x and in every "
        "profile: no address goes to a new pod while the old pod's peers still send to it. "
        "A build without it (IP_COOLDOWN_PERIOD=0, or a DEL that skips it) hands a freed "
        "address on within the cycle, the old pod's flows reach the new pod: early-reuse. "
        "DEL is keyed by container ID, so a repeated DEL frees nothing a new pod holds. "
        "Every profile's pool counts cooling addresses as taken and assigns new ones when "
        "a burst leaves only cooling ones: no pod waits the cooldown out (cooldown-wait).",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    pods, _, focus = settled(ctx, NODE, 3)
    ctx.step("a tight pool", **focus)
    # First, while the ENI has room (the cycles below fill it): every pod deleted at once
    # and as many added. The free addresses all cool down, and a build must assign new ones
    # rather than make the pods wait the cooldown out (cnikit.check.checkers.cooldown_wait).
    for old in pods:
        ctx.delete_pod(old)
    pods = [p for _ in range(len(pods))
            if (p := ctx.add_pod(NODE, retry_for=ctx.run_seconds(30) + 5))]
    ctx.step(f"a burst: every pod deleted at once, {len(pods)} new ones", **focus)
    reused = in_window = 0
    for _ in range(CYCLES):
        old = ctx.rng.choice(pods)
        pods.remove(old)
        deleted = time.monotonic()  # as the checker times it: before the DEL is sent
        ctx.delete_pod(old)
        new = ctx.add_pod(NODE, retry_for=ctx.run_seconds(30) + 5)
        if new is not None:
            pods.append(new)
            reused += new.ip == old.ip
            # The scenario tests anything only when a pod can come inside the cooldown.
            in_window += in_cooldown(ctx, deleted, new)
        # The runtime's retried DEL of the old sandbox, with its old prevResult: it must
        # succeed (what it would remove is gone) and free nothing the new pod holds
        # (cnikit.check.checkers.runtime_retries).
        ctx.replay_delete(old)
    ctx.step(f"{CYCLES} delete/add cycles ({reused} reused an IP)", **focus)
    ctx.wait_reconciles(NODE, 1)
    ctx.step("reconcile", **focus)
    if not in_window:
        # No ADD came back within the cooldown of its DEL: a build with no cooldown at all
        # would have passed too. A violation found meanwhile still stands (it outranks this).
        raise TooSlow(f"no pod came within the IP cooldown ({ctx.ip_cooldown:.2f}s) of a "
                      f"delete, in {CYCLES} cycles")
