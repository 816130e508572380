"""A seeded nemesis: IMDS faults (stale, missing, lag, error, latency, drop), EC2 faults
(throttle, error, latency, describe_lag), daemon SIGKILLs and restarts, and pod churn, for
--duration seconds. The whole schedule is drawn from the seed before the run starts, so a failing
seed replays the same schedule (`cnikit run random-chaos --seed N`); the report lists it.
"""

from __future__ import annotations

import random
import signal
import time

from cnikit.scenarios.common import peers
from cnikit.scenarios.engine import Ctx, Liveness, scenario

NODES = 2
IMDS_KINDS = ("stale", "missing", "lag", "error", "latency", "drop")
EC2_KINDS = ("throttle", "error", "latency", "describe_lag")
ACTIONS = (("add", 5), ("delete", 4), ("imds", 3), ("ec2", 2), ("kill", 1))


def make_schedule(seed: int, duration: float, nodes: int = NODES) -> list[dict]:
    """The nemesis and client operations, with their times, from the seed alone."""
    rng = random.Random(seed)
    out, t = [], 0.0
    names, weights = zip(*ACTIONS, strict=True)
    while True:
        t += rng.uniform(0.15, 0.9)
        if t >= duration:
            return out
        op = {"at": round(t, 3), "op": rng.choices(names, weights)[0],
              "node": rng.randrange(nodes), "pick": rng.random()}
        if op["op"] == "imds":
            op["kind"] = rng.choice(IMDS_KINDS)
            op["duration"] = round(rng.uniform(1.0, 6.0), 2)
            if op["kind"] == "lag":
                op["seconds"] = round(rng.uniform(0.5, 4.0), 2)
            elif op["kind"] in ("error", "drop"):
                op["probability"] = round(rng.uniform(0.2, 1.0), 2)
            elif op["kind"] == "latency":
                op["ms"] = rng.choice((20, 100, 400))
        elif op["op"] == "ec2":
            op["kind"] = rng.choice(EC2_KINDS)
            op["duration"] = round(rng.uniform(1.0, 6.0), 2)
            if op["kind"] == "describe_lag":
                op["seconds"] = round(rng.uniform(0.5, 4.0), 2)
            else:
                op["probability"] = round(rng.uniform(0.2, 0.8), 2)
            if op["kind"] == "latency":
                op["ms"] = rng.choice((20, 100, 300))
        elif op["op"] == "kill":
            op["down"] = round(rng.uniform(0.0, 2.0), 2)
        out.append(op)


def _apply(ctx: Ctx, op: dict) -> str:
    node = op["node"]
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
        iid = ctx.fabric.nodes[node].instance_id
        if op["kind"] in ("stale", "missing", "lag"):
            enis = ctx.node_enis(node)
            eni = enis[int(op["pick"] * len(enis))]
            target = {"mac": eni.mac}
        else:
            target = {"instance_id": iid}
        attrs = {k: op[k] for k in ("seconds", "probability", "ms") if k in op}
        h = ctx.imds_fault(op["kind"], target=target, duration=op["duration"], **attrs)
        return f"imds {op['kind']} {target} for {op['duration']}s ({h})"
    if op["op"] == "ec2":
        attrs = {k: op[k] for k in ("probability", "ms", "seconds") if k in op}
        fid = ctx.ec2_fault(op["kind"], duration=op["duration"], **attrs)
        return f"ec2 {op['kind']} for {op['duration']}s ({fid})"
    if op["op"] == "kill":
        ctx.kill_daemon(node, signal.SIGKILL)
        ctx.run_for(op["down"])
        restart(ctx, node)
        return f"killed node {node}'s daemon, restarted after {op['down']}s"
    raise AssertionError(op)


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
    peers(ctx, node=1, count=2)
    peers(ctx, node=0, count=2)
    ctx.step(f"chaos for {duration:.0f}s: {len(ctx.schedule)} operations from seed {ctx.seed}")
    start = time.monotonic()
    for op in ctx.schedule:
        ctx.run_for(start + op["at"] - time.monotonic())
        op["result"] = _apply(ctx, op)
        op["done_at"] = round(time.monotonic() - start, 3)
    ctx.heal()
    for n in range(NODES):
        if not ctx.cluster.daemons[n].alive():
            restart(ctx, n)
    ctx.step("faults cleared")
    for n in range(NODES):
        ctx.wait_within_targets(n, 30)
    ctx.wait_reconciles(0, 1)
    ctx.step("healed: pools within targets, a reconcile done")
