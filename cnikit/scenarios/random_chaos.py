"""A seeded nemesis: IMDS faults and EC2 faults (every kind whose file declares a `chaos`
draw), daemon SIGKILLs and restarts, and pod churn, for --duration seconds, plus
compound faults: two or three of IMDS, EC2 (a lagging Describe most
often, or an address taken from a pod until given back) and process faults (a daemon
restart) begun together so that they overlap, plus the nemesis actions whose file declares
a draw (cnikit.cluster.actions: every daemon restarted at once, a crash point armed for a
while, another principal's ENI sweep). The whole schedule is drawn from the seed
before the run starts, so a failing seed replays the same schedule (`cnikit run random-chaos
--seed N`); the report lists it, and the combinations of faults that were in effect at once
(cnikit.report.coverage; a `coverage` entry in the history).
"""

from __future__ import annotations

import random
import signal
import time

from cnikit.cloud.faults import KINDS as EC2_FAULTS
from cnikit.cluster.actions import ACTIONS as NEMESIS_ACTIONS
from cnikit.cluster.actions import act
from cnikit.cluster.actions import draw as draw_action
from cnikit.cluster.nemesis import TargetGone
from cnikit.report.coverage import coverage
from cnikit.scenarios.common import peers
from cnikit.scenarios.engine import SCENARIO, Ctx, Liveness, scenario
from fault_imds.faults import KINDS as IMDS_FAULTS
from fault_imds.faults import ImdsFault

NODES = 2
# How often each single operation is drawn, relative to the others: a client's pod add or
# delete, one IMDS or EC2 fault, a daemon kill. The single IMDS and EC2 faults' kinds are
# drawn from the kinds registries: each kind's `chaos` says whether and how
# (faultcore.fault.Chaos). The compounds' kinds below are chosen.
SINGLE_OPERATION_WEIGHTS = (("add", 5), ("delete", 4), ("imds", 3), ("ec2", 2), ("kill", 1))
# A compound: parts from two or three of these families, begun at once. The kinds are the
# ones whose overlap found bugs: a Describe lagging past the reconcile cooldown with a stale
# or lagging IMDS, a restart, or an address EC2 moves while a pod holds it.
COMPOUND_PARTS = {
    "imds": (("stale", 3), ("lag", 3), ("missing", 1), ("error", 1)),
    "ec2": (("describe-lag", 5), ("take-held", 2), ("throttle", 1), ("error", 1)),
    "process": (("restart", 3), ("kill", 1)),
}
COMPOUND_GAP = (1.5, 4.0)  # seconds between compounds
ACTION_GAP = (3.0, 8.0)  # seconds between two nemesis actions
ARMED_FOR = (1.0, 5.0)  # seconds a crash point stays armed


def make_schedule(seed: int, duration: float, nodes: int = NODES) -> list[dict]:
    """The nemesis and client operations, with their times, from the seed alone: the single
    operations (drawn as before compounds existed, so an old seed's operations stay) and the
    compounds (from a stream of their own), in time order; a taken address's give-back is
    an operation of its own."""
    out = _singles(random.Random(seed), duration, nodes)
    out += _compounds(random.Random(f"compound-{seed}"), duration, nodes)
    out += _actions(random.Random(f"actions-{seed}"), duration, nodes)
    return sorted(out, key=lambda op: op["at"])


def _actions(rng: random.Random, duration: float, nodes: int) -> list[dict]:
    """Nemesis actions (a stream of its own, so older seeds keep their other operations).
    One aimed at a daemon gets a node; one that leaves a daemon down (a crash point) gets
    an end: disarmed then, and every daemon down is restarted."""
    out = []
    for n, t in _every(rng, ACTION_GAP, duration):
        op = {"at": round(t, 3), "op": "act", "id": f"a{n}", **draw_action(rng)}
        if "node" in NEMESIS_ACTIONS.get(op["action"]).params:
            op["node"] = rng.randrange(nodes)
        lasts = round(rng.uniform(*ARMED_FOR), 2)
        out.append(op)
        out.append({"at": round(min(t + lasts, duration - 0.05), 3), "op": "act-end",
                    "id": op["id"]})
    return out


def _every(rng: random.Random, gap: tuple[float, float], duration: float):
    """(n, t): the n-th operation of a stream at t, a drawn gap after the one before, until
    the duration (the caller's draws for it come between two gaps, as they always did)."""
    t, n = 0.0, 0
    while True:
        t += rng.uniform(*gap)
        if t >= duration:
            return
        n += 1
        yield n, t


def _compounds(rng: random.Random, duration: float, nodes: int) -> list[dict]:
    out = []
    for n, t in _every(rng, COMPOUND_GAP, duration):
        families = rng.sample(sorted(COMPOUND_PARTS), rng.choice((2, 2, 3)))
        lasts = round(rng.uniform(2.0, 6.0), 2)
        parts = []
        for fam in sorted(families):
            kinds, weights = zip(*COMPOUND_PARTS[fam], strict=True)
            part = {"family": fam, "kind": rng.choices(kinds, weights)[0]}
            if part["kind"] == "describe-lag":
                part["seconds"] = round(rng.uniform(2.0, 7.0), 2)  # past the 3 s cooldown
            elif part["kind"] == "lag":
                part["seconds"] = round(rng.uniform(0.5, 3.0), 2)
            elif part["kind"] in ("throttle", "error"):
                part["probability"] = round(rng.uniform(0.2, 0.6), 2)
            elif part["kind"] == "kill":
                part["down"] = round(rng.uniform(0.0, 1.5), 2)
            part["pick"] = rng.random()
            parts.append(part)
        op = {"at": round(t, 3), "op": "compound", "id": f"c{n}", "node": rng.randrange(nodes),
              "duration": lasts, "parts": parts}
        out.append(op)
        if any(p["kind"] == "take-held" for p in parts):
            out.append({"at": round(min(t + lasts, duration - 0.05), 3), "op": "give-back",
                        "id": f"c{n}", "node": op["node"]})
    return out


def _singles(rng: random.Random, duration: float, nodes: int) -> list[dict]:
    out = []
    names, weights = zip(*SINGLE_OPERATION_WEIGHTS, strict=True)
    for _, t in _every(rng, (0.15, 0.9), duration):
        op = {"at": round(t, 3), "op": rng.choices(names, weights)[0],
              "node": rng.randrange(nodes), "pick": rng.random()}
        if op["op"] in ("imds", "ec2"):
            kind = rng.choice((IMDS_FAULTS if op["op"] == "imds" else EC2_FAULTS).drawable())
            op["kind"] = kind.kind
            op["duration"] = round(rng.uniform(1.0, 6.0), 2)
            op.update(kind.chaos.draw(rng))
        elif op["op"] == "kill":
            op["down"] = round(rng.uniform(0.0, 2.0), 2)
        out.append(op)
    return out


def imds_fault(ctx: Ctx, kind: str, target: dict, duration: float, **attrs) -> str:
    """An IMDS fault as random chaos applies it; one line for the schedule. One aimed at an
    interface the build freed between the draw and the fault (a scale-down under load) is
    skipped, and the nemesis records why: not retargeted, since another interface would be
    a schedule the seed never drew, and never an error of the run."""
    try:
        h = ctx.imds_fault(kind, target=target, duration=duration, **attrs)
    except TargetGone as e:
        return str(e)
    if IMDS_FAULTS.get(kind).ends is not ImdsFault.ends:
        # It may end by itself before its duration (stale-until-change at the next attach
        # or detach): the history records that end when it happens.
        ctx.nemesis.imds.follow_end(h, duration)
    return f"imds {kind} {target} for {duration}s ({h})"


def _apply(ctx: Ctx, op: dict) -> str:
    # A nemesis action carries a node only when it takes one (crash-at, as its attribute),
    # and its end none; every other operation is aimed at a node.
    if op["op"] == "act":
        return _act(ctx, op)
    if op["op"] == "act-end":
        return _act_end(ctx, op["id"])
    node = op["node"]
    if op["op"] == "compound":
        return _compound(ctx, op)
    if op["op"] == "give-back":
        return _give_back(ctx, op["id"])
    if op["op"] == "add":
        pod = ctx.add_pod(node, retry_for=3)
        return f"added {pod.name} {pod.ip}" if pod else "no IP in time"
    if op["op"] == "delete":
        mine = ctx.pods_on(node)
        if len(mine) <= 1:
            return "nothing to delete"
        pod = mine[int(op["pick"] * len(mine))]
        ctx.delete_pod(pod)
        return f"deleted {pod.name}"
    if op["op"] == "imds":
        kind = IMDS_FAULTS.get(op["kind"])
        if kind.chaos is not None and kind.chaos.aim == "interface":
            enis = ctx.node_enis(node)
            eni = enis[int(op["pick"] * len(enis))]
            target = {"mac": eni.mac}
        else:
            target = {"instance_id": ctx.fabric.nodes[node].instance_id}
        return imds_fault(ctx, op["kind"], target, op["duration"], **_attrs(kind, op))
    if op["op"] == "ec2":
        kind = EC2_FAULTS.get(op["kind"])
        fid = ctx.ec2_fault(op["kind"], duration=op["duration"], **_attrs(kind, op))
        return f"ec2 {op['kind']} for {op['duration']}s ({fid})"
    if op["op"] == "kill":
        ctx.kill_daemon(node, signal.SIGKILL)
        ctx.run_for(op["down"])
        restart(ctx, node)
        return f"killed node {node}'s daemon, restarted after {op['down']}s"
    raise AssertionError(op)


def _attrs(kind, op: dict) -> dict:
    """The kind's attributes (its params, and probability) among an operation's fields."""
    return {k: op[k] for k in (*kind.params, "probability") if k in op}


def _compound(ctx: Ctx, op: dict) -> str:
    """The parts begun together (the process part last: a restart blocks until ready)."""
    node, lasts, done = op["node"], op["duration"], []
    for part in sorted(op["parts"], key=lambda p: p["family"] == "process"):
        kind = part["kind"]
        if part["family"] == "imds":
            enis = ctx.node_enis(node)
            if kind == "error":
                target = {"instance_id": ctx.instance_id(node)}
            else:
                target = {"mac": enis[int(part["pick"] * len(enis))].mac}
            attrs = {k: part[k] for k in ("seconds",) if k in part}
            done.append(imds_fault(ctx, kind, target, lasts, **attrs))
        elif kind == "take-held":
            done.append(_take(ctx, op, part))
        elif part["family"] == "ec2":
            attrs = {k: part[k] for k in ("seconds", "probability") if k in part}
            ctx.ec2_fault(kind, duration=lasts, **attrs)
            done.append(f"ec2 {kind}")
        elif kind == "restart":
            restart(ctx, node)
            done.append("daemon restart")
        else:
            ctx.kill_daemon(node, signal.SIGKILL)
            ctx.run_for(part["down"])
            restart(ctx, node)
            done.append(f"daemon kill, {part['down']}s down")
    return f"compound {op['id']} on node {node} for {lasts}s: " + ", ".join(done)


def _act(ctx: Ctx, op: dict) -> str:
    """A nemesis action from the registry; a daemon it could not restart is the build's
    liveness violation, any other failure is recorded by the nemesis and the run goes on."""
    from cnikit.errors import DaemonNotReady

    spec = {k: v for k, v in op.items() if k not in ("at", "op", "id", "result", "done_at")}
    try:
        result = act(ctx.nemesis, spec, NODES)
    except DaemonNotReady as e:
        raise Liveness("nodes", f"a daemon did not become ready after {op['action']}",
                       {"daemon": str(e)[:300]}) from None
    except Exception as e:  # noqa: BLE001 - recorded as a failed act by the nemesis
        return f"{op['action']} failed: {str(e)[:120]}"
    if result.get("failed"):
        raise Liveness("nodes", f"a daemon did not become ready after {op['action']}",
                       {"daemons": result["failed"]})
    if "id" in result:
        ctx.armed[op["id"]] = result["id"]
    return f"{op['action']}: {result}"


def _act_end(ctx: Ctx, aid: str) -> str:
    """A crash point disarmed (if it did not fire), and every daemon down restarted, and
    the component a crash point killed (an operator calling for the node)."""
    point = ctx.nemesis.crash_points.pop(ctx.armed.pop(aid, None), None)
    said = []
    if point is not None:
        fired = point.close()  # a kill under way is done first: restarted below
        said.append(f"crash point fired on {fired['action']}" if fired
                    else "crash point disarmed unfired")
        caller = (fired or {}).get("caller") or {}
        if "component" in caller:
            ctx.restart_caller(caller)
            said.append(f"component {caller['component']} restarted")
    for n in range(NODES):
        if not ctx.cluster.daemons[n].alive():
            restart(ctx, n)
            said.append(f"node {n}'s daemon restarted")
    return ", ".join(said) or "nothing to end"


def _take(ctx: Ctx, op: dict, part: dict) -> str:
    """EC2 gives a pod's address to another interface until the op's give-back."""
    mine = [p for p in ctx.pods_on(op["node"]) if getattr(p, "ip", None)]
    if not mine:
        return "no pod to take an address from"
    pod = mine[int(part["pick"] * len(mine))]
    home = next((e.eni_id for e in ctx.node_enis(op["node"]) if pod.ip in e.ips), None)
    if home is None:
        return f"{pod.ip} is not the node's in EC2"
    try:
        fid = _retried(ctx, lambda: ctx.nemesis.take_held(pod.ip, ctx.spare_eni))
    except Exception as e:  # noqa: BLE001 - recorded by the nemesis (start, fail, end)
        return f"could not take {pod.ip}: {str(e)[:120]}"
    ctx.taken[op["id"]] = (fid, home)
    return f"{pod.ip} of {pod.name} taken"


def _give_back(ctx: Ctx, cid: str) -> str:
    fid, home = ctx.taken.pop(cid, (None, None))
    if fid is None:
        return "nothing taken"
    try:
        _retried(ctx, lambda: ctx.nemesis.give_back(fid, home))
    except Exception as e:  # noqa: BLE001 - its ENI gone meanwhile (recorded by the nemesis)
        return f"could not give back: {str(e)[:120]}"
    return f"given back to {home}"


def _retried(ctx: Ctx, act, tries: int = 20):
    """The nemesis's EC2 calls meet the EC2 faults in effect like anyone's: retried a while."""
    for i in range(tries):
        try:
            return act()
        except Exception:  # noqa: BLE001 - the last try raises
            if i == tries - 1:
                raise
            ctx.run_for(0.1)
    return None


def restart(ctx: Ctx, node: int, timeout: float = 30.0) -> None:
    """Restart like a DaemonSet does: a daemon that cannot start (IMDS down) is retried.
    Faults last at most a few seconds: a daemon still not ready after `timeout` is stuck."""
    end = time.monotonic() + timeout
    while True:
        try:
            ctx.restart_daemon(node)
            return
        except Exception as e:  # noqa: BLE001 - CrashLoopBackOff, bounded (the nemesis
            # recorded the failed restart)
            if time.monotonic() >= end:
                raise Liveness(f"node {node}", f"the daemon did not become ready within "
                               f"{timeout:g}s of restarts", {"last error": str(e)[:300]}) from None
            ctx.run_for(0.3)


@scenario(
    "random-chaos",
    "seeded mix of IMDS and EC2 faults, daemon kills and pod churn for --duration seconds",
    why="hardened must hold under anything the kit injects; upstream profiles fail or not "
        "depending on what the seed happens to line up (not asserted).",
    nodes=NODES,
    env={"WARM_IP_TARGET": "2", "MAX_ENI": "2"},
    duration=15.0,
)
def run(ctx: Ctx) -> None:
    duration = ctx.duration or 15.0
    ctx.schedule = [dict(op) for op in make_schedule(ctx.seed, duration)]
    ctx.taken = {}  # compound id -> (take-held id, the ENI to give the address back to)
    ctx.armed = {}  # action id -> the id of the crash point it armed
    ctx.spare_eni = ctx.spare_interface()
    peers(ctx, node=1, count=2)
    peers(ctx, node=0, count=2)
    ctx.step(f"chaos for {duration:.0f}s: {len(ctx.schedule)} operations from seed {ctx.seed}")
    start = time.monotonic()
    for op in ctx.schedule:
        ctx.run_for(start + op["at"] - time.monotonic())
        op["result"] = _apply(ctx, op)
        op["done_at"] = round(time.monotonic() - start, 3)
    for cid in list(ctx.taken):
        _give_back(ctx, cid)
    for aid in list(ctx.armed):
        _act_end(ctx, aid)
    ctx.heal()
    for n in range(NODES):
        if not ctx.cluster.daemons[n].alive():
            restart(ctx, n)
    ctx.step("faults cleared")
    for n in range(NODES):
        ctx.wait_within_targets(n, 30)
    ctx.wait_reconciles(0, 1)
    ctx.step("healed: pools within targets, a reconcile done")
    cov = coverage(ctx.history.entries())
    ctx.history.info(SCENARIO, "coverage", {"seed": ctx.seed, **cov})
    ctx.step("fault combinations: " + (", ".join(
        f"{k} {v:g}s" for k, v in cov["families"].items()) or "none"))
