"""The runtime's retries (cilium #10065/#10066, VPC CNI #1939, #2048, #2331).

Runtimes repeat CNI calls: kubelet and containerd resend an ADD whose answer they lost,
replay a DEL with the sandbox's old prevResult long after its address went to a new pod,
send a DEL with an empty CNI_NETNS once the namespace is gone, send DELs while the node's
daemon is down and retry them after it is back, and give up on a DEL that keeps failing.
The CNI spec wants a DEL to succeed when what it would remove is gone, and a DEL frees what
its sandbox holds, never an address by itself: cilium's agent freed a replayed DEL's stale
prevResult address, which a new pod held by then (cilium #10065, fixed by #10066).

The daemon's restart comes last, and pods that lived through it get the same retries: a
repeated ADD must answer the address they had (the daemon knows them only from what it
kept), and their DEL, replayed, frees it once. The run then goes on until the leak checker
has judged what the DEL freed: a daemon that forgot such a pod leaks its address.

Each retry is a client operation (`cni-retry`) judged by cnikit.check.checkers.
runtime_retries; a live pod that loses its address is seen by reachability and shared-ip.
"""

from __future__ import annotations

import time

from cnikit.scenarios.common import leaks_judged, pods_until_reuse, settled
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "runtime-retries",
    "the runtime's retries: a repeated ADD, a DEL replayed after its IP was reused, a DEL "
    "without netns, DELs while the daemon is down, retries of pods from before its restart",
    why="cilium #10065 (fix #10066): a replayed DEL with a stale prevResult freed the "
        "address a new pod held; VPC CNI #1939 (DEL with an empty CNI_NETNS), #2048 and "
        "#2331 (DELs while aws-node is down fail, pods stuck terminating). Every profile "
        "keys DEL by sandbox and answers success when it holds nothing, so all hold; a "
        "build that fails a repeated DEL, frees by address or answers a repeated ADD with "
        "a second IP is a violation (runtime-retry, unreachable, shared-ip), and so is one "
        "that answers a pod from before its restart with a new IP (runtime-retry) or "
        "leaks its address after the DEL (leak).",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    pods, _, focus = settled(ctx, NODE, 4)
    ctx.step("pods up", **focus)

    # A repeated ADD of live sandboxes: the same address, or an error, never a second one;
    # and the error path must not free what the first ADD gave (ptp rolls a failed ADD back
    # with a DEL of the sandbox). The two pods live on through the steps below, whose new
    # pods would get an address freed so (shared-ip) or see EC2 take it (ip-not-owned).
    for pod in pods[2:4]:
        ctx.repeat_add(pod)
    ctx.step("ADD repeated for two pods", **focus)

    # A DEL without the namespace, then the runtime's replay of it.
    gone = pods.pop(0)
    ctx.delete_without_netns(gone)
    ctx.replay_delete(gone)
    ctx.step("DEL with an empty CNI_NETNS, replayed", **focus)

    # A DEL replayed with its old prevResult after the address went to a new pod.
    old = pods.pop(0)
    deleted = time.monotonic()
    ctx.delete_pod(old)
    # Past its cooldown the address may go to a new pod (a build hands out fresh ones first).
    ctx.run_for(max(0.0, deleted + ctx.ip_cooldown + 0.2 - time.monotonic()))
    until = time.monotonic() + ctx.run_seconds(30) + 5
    new = pods_until_reuse(ctx, NODE, old.ip, until, room=max(0, min(6, ctx.room(NODE))))
    reused = next((p for p in new if p.ip == old.ip), None)
    for pod in new:
        if pod is not reused:
            ctx.delete_pod(pod)  # room for the pods below
    if reused is None:
        # A build that never hands a freed address on (or not soon) leaves the replayed DEL
        # nothing to take: it is replayed all the same.
        ctx.adapt(f"no new pod got {old.ip} (deleted {old.name}'s) within the scenario's bound")
    else:
        pods.append(reused)
    ctx.replay_delete(old)
    ctx.step(f"DEL of {old.name} replayed"
             + (f" while {reused.name} holds {old.ip}" if reused else ""), **focus)
    if reused is not None:
        # Had the DEL freed it, the address would be out of its cooldown by now and go to
        # one of the next pods (shared-ip); the prober meanwhile sees a pod left dark.
        ctx.run_for(ctx.ip_cooldown + ctx.run_seconds(10) + 0.2)
        until = time.monotonic() + ctx.run_seconds(30) + 5
        pods += pods_until_reuse(ctx, NODE, old.ip, until,
                                 room=max(0, min(4, ctx.room(NODE))))
        ctx.step(f"new pods after the replayed DEL ({reused.name} keeps {old.ip})", **focus)

    # DELs while the daemon is down: one retried after it is back, one given up on.
    waiting, abandoned = pods.pop(0), pods.pop(0)
    # Pods that live through the restart: the restarted daemon knows them only from what it
    # kept (a checkpoint, EC2), and the runtime's retries reach them too (below).
    survivors = [ctx.require_pod(NODE) for _ in range(max(0, 2 - len(pods)))] + pods[:2]
    ctx.kill_daemon(NODE)
    if ctx.try_delete(waiting, "del-daemon-down"):
        ctx.delete_pod(waiting)  # answered: the runtime removes the sandbox (no retry)
        waiting = None
    ctx.retry_delete(abandoned, "del-given-up", retry_for=0.0)
    ctx.restart_daemon(NODE)
    if waiting is not None:
        ctx.retry_delete(waiting, "del-after-restart", retry_for=ctx.run_seconds(30) + 5)
    ctx.step("DELs while the daemon was down, one retried after its restart", **focus)

    # The retries of pods from before the restart: a repeated ADD must answer the address
    # the pod had (a daemon that lost it answers a second one: runtime-retry), and a DEL,
    # replayed as well, frees it once (a daemon that forgot the pod leaks its address).
    for pod in survivors:
        ctx.repeat_add(pod)
    last = survivors[0]
    ctx.delete_pod(last)
    last_deleted = time.time()
    ctx.replay_delete(last)
    ctx.step(f"ADD repeated for {' and '.join(p.name for p in survivors)}, from before the "
             f"restart; {last.name} deleted, its DEL replayed", **focus)

    # New pods: an address a retry freed under a live pod would reach one of them.
    for _ in range(min(2, ctx.room(NODE))):
        pods.append(ctx.require_pod(NODE, retry_for=ctx.run_seconds(30) + 10))
    ctx.run_for(ctx.run_seconds(10) + 0.5)
    ctx.step("new pods", **focus)
    leaks_judged(ctx, NODE, last_deleted)
    ctx.step(f"the leak checker judged {last.name}'s address", **focus)
