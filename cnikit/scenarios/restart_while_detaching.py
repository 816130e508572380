"""The daemon restarts while an ENI it freed is still detaching.

On real EC2 a detach takes seconds: DeleteNetworkInterface answers "... is currently in
use." until it completes, and IMDS still lists the ENI meanwhile. Upstream #732 (fixed by
#754; also #401, #608, #1223): a daemon restarted in that window forgot the ENI it was
deleting, or took it back from IMDS, and the ENI was left "available" for good, costing the
account an ENI and the subnet its addresses.

Node 0 (t3.small: 3 ENIs of 3 secondary addresses, WARM_ENI_TARGET=1) fills a secondary
ENI with pods under the gate's `slow-attachment` fault (detaches take DETACH_S seconds);
the pods leave, and once EC2 shows one of the node's ENIs detaching, the node's daemon is
restarted, and pods come to node 0 at once (up to its 3 ENIs' worth: the last may wait for
the detach). Once it is over, the node's pods leave again and an ENI is freed without a
restart; then new pods, and the run goes on past the eni-leak checker's grace. A correct build deletes the ENI once the detach completes and never hands out its
addresses: `eni-leak` catches an ENI left available, `ip-not-owned`/unreachable pods an
ENI taken back while it was leaving.
"""

from __future__ import annotations

from cnikit.scenarios.common import peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
ENIS = 3
SLOTS = 3  # t3.small: 4 addresses per ENI, one of them the primary
# Seconds a detach takes (real EC2: a few; #1399 saw more than upstream's 2 s wait). Long
# enough for a restart to fall inside it on a busy machine.
DETACH_S = 12.0


@scenario(
    "restart-while-detaching",
    "the daemon restarts while an ENI it freed is still detaching: no ENI may be left "
    "available, and new pods must work",
    why="upstream #732 (fixed by #754), #401, #608, #1223: a detach takes seconds, Delete "
        "answers 'in use' meanwhile, and a daemon restarted in that window leaked the ENI. "
        "Every profile deletes what it detached until EC2 takes it (pending_deletes) and "
        "never adopts an ENI EC2 shows detaching: all hold. A build that tries the delete "
        "once (delete-eni-once) leaves it available: eni-leak; one that takes the detaching "
        "ENI back after its restart (adopt-detaching-eni) hands out addresses EC2 moves "
        "away: ip-not-owned, unreachable pods.",
    nodes=2,
    env={"WARM_ENI_TARGET": "1", "MAX_ENI": str(ENIS)},
    instance_type="t3.small",
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    ctx.ec2_fault("slow-attachment", target={"action": "DetachNetworkInterface"},
                  attach_s=0.0, detach_s=DETACH_S)
    # 1: a restart while the freed ENI is detaching, and pods that come at once after it
    # (a build that took the ENI back hands them its addresses).
    first = _free_an_eni(ctx, _onto_a_secondary_eni(ctx), "first")
    ctx.step(f"{first.eni_id} detaching: restarting node {NODE}'s daemon", **_focus(first))
    ctx.restart_daemon(NODE)
    still = _status(ctx, first.eni_id) == "detaching"
    ctx.step(f"node {NODE}'s daemon ready again, {first.eni_id} "
             f"{'still detaching' if still else 'detached by then'}", **_focus(first))
    # The node's ENI slots may all be taken until the detach completes: the last pods wait.
    wait = DETACH_S + max(10.0, ctx.run_seconds(120))
    window = [p for _ in range(min(ENIS * SLOTS, ctx.room(NODE)))
              if (p := ctx.add_pod(NODE, retry_for=wait))]
    ctx.step(f"{len(window)} pods on node {NODE} after the restart", **_focus(first))
    _detached(ctx, first)
    ctx.run_for(max(2.0, ctx.run_seconds(60)))  # those pods keep working past the detach
    # 2: the same without a restart (a restart would sweep what a build forgot in 1).
    second = _free_an_eni(ctx, ctx.pods_on(NODE), "second")
    _detached(ctx, second)
    new = [p for _ in range(SLOTS) if (p := ctx.add_pod(NODE, retry_for=10.0))]
    ctx.step(f"{len(new)} new pods on node {NODE}", node=NODE)
    leak = ctx.watch.invariants.checkers.get("eni-leak")
    grace = getattr(leak, "grace", ctx.run_seconds(360))
    ctx.run_for(grace + max(2.0, ctx.run_seconds(60)))
    ctx.step(f"past the eni-leak grace ({grace:.0f}s): {first.eni_id} "
             f"{_where(ctx, first.eni_id)}, {second.eni_id} {_where(ctx, second.eni_id)}",
             node=NODE)


def _free_an_eni(ctx: Ctx, pods: list, which: str):
    """Node 0's pods (some on a secondary ENI) deleted: the ENI EC2 then shows detaching."""
    ctx.step(f"{len(pods)} pods on node {NODE}, some on a secondary ENI; detaches take "
             f"{DETACH_S:g}s", node=NODE)
    for pod in pods:
        ctx.delete_pod(pod)
    ctx.step(f"node {NODE}'s pods deleted: the build may free an ENI", node=NODE)
    leaving = ctx.design(lambda: _detaching(ctx), DETACH_S + ctx.run_seconds(180),
                         f"node {NODE}'s build detaches a {which} ENI")
    if leaving is None:
        ctx.not_exposed(f"node {NODE}'s build detached no {which} ENI: no detach to judge")
    return leaving


def _detached(ctx: Ctx, eni) -> None:
    ctx.precondition(lambda: _status(ctx, eni.eni_id) != "detaching", DETACH_S + 15,
                     f"{eni.eni_id}'s detach completes")
    ctx.step(f"{eni.eni_id}'s detach completed", **_focus(eni))


def _focus(eni) -> dict:
    return {"node": NODE, "eni": eni.eni_id, "mac": eni.mac}


def _onto_a_secondary_eni(ctx: Ctx) -> list:
    """Pods on node 0 until one holds an address of a secondary ENI."""
    pods = []
    primary = ctx.node_enis(NODE)[0].eni_id
    for _ in range(ENIS * SLOTS):
        if ctx.room(NODE) <= 0:
            break
        pods.append(ctx.require_pod(NODE, retry_for=max(10.0, ctx.run_seconds(120))))
        owners = ctx.gate.owners().ips
        if any((o := owners.get(p.ip)) is not None and o.eni_id != primary for p in pods):
            return pods
    ctx.not_exposed(f"node {NODE}'s build put no pod on a secondary ENI: none to free")


def _detaching(ctx: Ctx):
    iid = ctx.fabric.nodes[NODE].instance_id
    return next((e for e in ctx.gate.owners().enis.values()
                 if e.instance_id == iid and e.attachment_status == "detaching"), None)


def _status(ctx: Ctx, eni_id: str) -> str | None:
    info = ctx.ec2_eni(eni_id)
    return None if info is None else info.attachment_status


def _where(ctx: Ctx, eni_id: str) -> str:
    info = ctx.ec2_eni(eni_id)
    if info is None:
        return "deleted"
    return "available" if info.instance_id is None else f"on {info.instance_id}"
