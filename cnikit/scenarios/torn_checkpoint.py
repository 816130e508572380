"""The daemon is handed a torn checkpoint: SIGKILLed while it writes its state, the file is
found cut short (or empty), and the daemon is started on it.

What upstream does with one (aws/amazon-vpc-cni-k8s, pkg/ipamd/datastore, the same in
v1.18.3, v1.18.4, v1.20.4 and master): `JSONFile.Restore` opens
/var/run/aws-node/ipam.json and decodes it with `json.NewDecoder(f).Decode`;
`ReadBackingStore` treats only a missing file as a fresh node (`os.IsNotExist`) and wraps
any other error ("failed ipam state recovery from backing store": `EOF` for an empty file,
`unexpected EOF` for one cut mid-document), as it does a wrong `version`. `nodeInit`
returns it, `ipamd.New` fails and aws-node exits 1 ("Initialization failure"): kubelet
restarts it and it fails again, until someone removes the file. It never starts without
its pods. Its writes (`JSONFile.Checkpoint`: a temp file, fsync, rename) cannot tear the
file themselves; a disk that loses the file's tail, or another writer, can.

On each node the write trap kills the daemon the moment it opens a file of its state
directory for writing, for an ADD (common.kill_in_write_of_an_add). The file it keeps its
state in is the one the trap caught, or, when that was a temp file to be renamed over it
(`ipam.json.tmp123` for `ipam.json`), the file whose name the temp file's begins with. Node
0's is cut to half its length, node 1's emptied. Then the daemon is started, and started
again if it exits, as kubelet does. A build holds if it refuses to start both times (it
stays not ready, and says why), or if it starts and has recovered every live pod: their
repeated ADDs answer their addresses (`runtime-retry` otherwise), new pods get none of
theirs (`shared-ip`), the pods stay reachable, and a deleted one's address is freed once
(`leak`, judged before the run ends). A build with nothing in its state directory is not
exposed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cnikit.scenarios.common import fill, kill_in_write_of_an_add, leaks_judged
from cnikit.scenarios.engine import Ctx, scenario

# How each node's state file is torn: a write cut short, and an in-place writer's truncate.
TEARS = {0: "cut", 1: "empty"}
# How long the runtime retries the ADD the daemon died in: past two starts of a daemon that
# refuses (0.1 s each for the reference daemon), or one that starts (then it is answered).
RETRY_S = 10.0


@scenario(
    "torn-checkpoint",
    "the daemon is killed writing its state, the file is cut short or emptied, and the "
    "daemon started on it",
    why="upstream's ipamd refuses to start on an ipam.json it cannot decode (anything but "
        "a missing file is an error of nodeInit: aws-node exits and is restarted), and so "
        "does every profile (CheckpointError: 'cannot recover'): all hold. A build that "
        "starts on a torn checkpoint as on a fresh node forgets its pods: a repeated ADD "
        "answers a new address (runtime-retry), new pods get the old pods' addresses "
        "(shared-ip).",
    nodes=2,
    env={"WARM_IP_TARGET": "2"},
)
def run(ctx: Ctx) -> None:
    for node in TEARS:
        fill(ctx, node, 3)
    for node in TEARS:
        ctx.wait_within_targets(node)
    ctx.step("3 pods on each node")
    adders = []
    for node, how in TEARS.items():
        # The ADD in flight waits out the restarts; a daemon that refuses to start never
        # answers it, and the runtime gives up on it once they are over.
        adder, fired = kill_in_write_of_an_add(ctx, node, retry_for=RETRY_S)
        adders.append(adder)
        if fired is None:
            ctx.not_exposed(f"node {node}'s daemon wrote nothing in its state directory for "
                            "an ADD: no state on disk to tear")
        path = state_file(Path(fired.get("path", "")))
        if path is None:
            ctx.not_exposed(f"node {node}'s daemon opened {fired.get('path')!r} for writing, "
                            "and no state file is there to tear")
        ctx.step(f"node {node}'s daemon killed writing its state; {path.name} {tear(path, how)}",
                 node=node)
        refused = ctx.restart_refused(node)
        on = "its torn state"
        if refused is not None:
            on = "what its first start left"
            # kubelet starts a daemon that exited again: one that removed or rewrote the
            # file on its way out would start now, on whatever it left.
            ctx.step(f"node {node}'s daemon did not start on it ({_said(refused)}); "
                     "started again, as kubelet does", node=node)
            refused = ctx.restart_refused(node)
        if refused is not None:
            ctx.step(f"node {node}'s daemon refuses to start: {_said(refused)}",
                     node=node)
            continue
        ctx.step(f"node {node}'s daemon started on {on}", node=node)
        recovered(ctx, node)
    for adder in adders:
        adder.join(RETRY_S + 10)


def state_file(trapped: Path) -> Path | None:
    """The file a build keeps its state in, from the one the trap caught it opening for
    writing: a file of the same directory whose name that one's begins with (a temp file
    renamed over it once written: `ipam.json.tmp123`, `state.json.new`), the longest; else
    the caught file itself (written in place). None when neither is there."""
    if not trapped.name:
        return None
    stems = [p for p in trapped.parent.iterdir() if p.is_file() and p != trapped
             and trapped.name.startswith(p.name)]
    if stems:
        return max(stems, key=lambda p: len(p.name))
    return trapped if trapped.is_file() else None


def tear(path: Path, how: str) -> str:
    """Cut the file to half its length ("cut") or to nothing ("empty"); what was done."""
    size = path.stat().st_size
    keep = size // 2 if how == "cut" else 0
    os.truncate(path, keep)
    return f"torn: {size} -> {keep} bytes"


def recovered(ctx: Ctx, node: int) -> None:
    """The daemon started on a torn state file: it must know every live pod of the node.
    The runtime repeats their ADDs (a pod it forgot gets a second address), new pods come
    (one given a forgotten address shares it), and a pod is deleted, its address judged by
    the leak checker before the run ends."""
    old = ctx.pods_on(node)
    for pod in old:
        ctx.repeat_add(pod)
    new = [ctx.require_pod(node, retry_for=ctx.run_seconds(30) + 10)
           for _ in range(min(ctx.eni_capacity, ctx.room(node)))]
    ctx.step(f"node {node}: ADD repeated for its {len(old)} pods, {len(new)} new pods",
             node=node)
    gone = old[0]
    ctx.delete_pod(gone)
    deleted = time.time()
    ctx.run_for(ctx.run_seconds(10) + 0.5)
    leaks_judged(ctx, node, deleted)
    ctx.step(f"node {node}: {gone.name} deleted, the leak checker judged its address",
             node=node)


def _said(text: str) -> str:
    """The last line of a daemon's log tail (the handle joins its lines with " | "): what
    it said as it gave up."""
    return text.strip().rsplit(" | ", 1)[-1][-160:]
