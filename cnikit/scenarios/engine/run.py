"""Running one scenario: start the cluster, watch it, play the scenario, judge, report."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

from cnikit.check.history import CLIENT, History
from cnikit.check.stall import StallMeter, run_too_slow
from cnikit.errors import UsageError
from cnikit.scenarios.engine.ctx import Ctx
from cnikit.scenarios.engine.outcomes import (
    SCENARIO,
    Liveness,
    NotExposed,
    Precondition,
    ScenarioFailed,
    TooSlow,
)
from cnikit.scenarios.engine.registry import Scenario
from cnikit.scenarios.engine.result import RunResult, _describe
from cnikit.scenarios.engine.sampler import DaemonSampler

DEFAULT_SCALE = 0.05  # 60 s reconcile -> 3 s, 30 s IP cooldown -> 1.5 s
STRICT_LEAKS_ENV = "CNIKIT_STRICT_LEAKS"  # "1": leaks are violations (what certify sets)

# Daemon settings every scenario shares. The observe ports (61678/61679) stay on: each
# node's daemon has its own namespace, so the fixed ports do not collide.
# The reference daemon's private status API is off in every run: scenarios observe any
# build from outside only (EC2, the IMDS and its request log, pods, CNI results, processes,
# the target's [observe] ports), so its verdicts hold for builds without that API.
BASE_ENV: dict[str, str] = {"CNIKIT_PRIVATE_STATUS": "off"}


# ---- the cluster, with the EC2 upstream of the user's choice ----------------------------

def make_cluster(nodes: int, target, scale: float, env: dict, seed: int, ec2: str,
                 ec2_endpoint: str | None, instance_type: str = "m5.large",
                 runtime: str | None = None, ip_family: str | None = None):
    """A CniCluster (not started) running `target` (a Target, built-in name or file) with
    pods of `ip_family`."""
    from cnikit.cluster import CniCluster

    return CniCluster(nodes=nodes, target=target, instance_type=instance_type, scale=scale,
                      env={**BASE_ENV, **env}, imds_seed=seed, ec2=ec2, ec2_endpoint=ec2_endpoint,
                      seed=seed, runtime=runtime, ip_family=ip_family)


# ---- running one ---------------------------------------------------------------------------

def _jsonable(x):
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    if isinstance(x, dict):
        return x
    return getattr(x, "__dict__", str(x))


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for pkg in ("cnikit", "moto", "boto3", "pyroute2"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def check_profile(profile: str) -> None:
    from cnikit.daemon import profiles

    profiles.get(profile)  # a one-line UsageError when unknown


def run_scenario(sc: Scenario, target=None, seed: int = 1, ec2: str = "moto",
                 ec2_endpoint: str | None = None, report_dir: str | Path | None = None,
                 duration: float | None = None, scale: float | None = None,
                 on_step: Callable | None = None, observe: float = 1.0,
                 progress: Callable[[str], None] | None = None, runtime: str | None = None,
                 profile: str | None = None, strict_leaks: bool | None = None,
                 slower: tuple[float, ...] | None = None) -> RunResult:
    """Bring up the cluster, watch it, play the scenario, judge, tear everything down.
    `target`: a Target, a built-in name or a target file (default the default profile);
    `profile=` is an alias for a built-in name. `strict_leaks`: a leak is a violation
    (certification) rather than a warning; None: CNIKIT_STRICT_LEAKS=1 in the environment.

    A run the machine was too slow for is run again at slower time scales (`slower`: the
    factors, default CNIKIT_SLOWER_SCALES or 2 then 4; cnikit.scenarios.engine.adapt) before
    it may be called inconclusive; the result says which scale it used and why."""
    from cnikit.runtime import require_root, time_scale
    from cnikit.scenarios.engine import adapt
    from cnikit.targets import default_name, resolve_target

    if target is None and profile is not None:
        check_profile(profile)
    tgt = resolve_target(target or profile or default_name())
    if ec2 not in ("moto", "localstack"):
        raise UsageError(f"--ec2 must be moto or localstack, not {ec2!r}")
    if not tgt.runs(sc):
        raise UsageError(f"scenario {sc.name} is an {sc.family} scenario; {tgt.name} runs "
                         f"{' and '.join(tgt.families)} (its ip_family)")
    if duration is not None and duration <= 0:
        raise UsageError(f"--duration must be positive, got {duration}")
    factors = adapt.factors(slower)
    require_root(f"scenario {sc.name}")
    if scale is None:
        scale = time_scale() if "CNIKIT_TIME_SCALE" in os.environ else DEFAULT_SCALE
    say = progress or (lambda msg: None)

    def attempt(factor: float) -> RunResult:
        return _run_once(sc, tgt, seed, ec2, ec2_endpoint, duration, scale * factor,
                         on_step, observe, say, runtime, strict_leaks)

    return adapt.run(attempt, scale, factors, report_dir, write_report, say,
                     f"{sc.name} [{tgt.name}] seed {seed}")


def _run_once(sc: Scenario, tgt, seed: int, ec2: str, ec2_endpoint: str | None,
              duration: float | None, scale: float,
              on_step: Callable | None, observe: float, say: Callable[[str], None],
              runtime: str | None, strict_leaks: bool | None) -> RunResult:
    """One run at one time scale, judged, its report not yet written (run_scenario, without
    its re-runs)."""
    from cnikit.check.watch import Watch, required_ip_cooldown
    from cnikit.cluster.nemesis import TargetGone
    from cnikit.containers.options import runtime_params

    profile = tgt.name
    duration = duration if duration is not None else sc.duration
    t0, started = time.monotonic(), time.time()
    result = RunResult(sc.name, sc.description, profile, seed, "error", tgt.expected(sc.name),
                       0.0, started, target=tgt.name,
                       params={"scale": scale, "env": sc.env, "nodes": sc.nodes,
                               "instance_type": sc.instance_type, "ip_family": sc.vpc_family,
                               "duration": duration, "ec2": ec2,
                               "target": str(tgt.source) if tgt.source else tgt.name},
                       versions=_versions())
    say(f"{sc.name} [{profile}] seed {seed}: starting {sc.nodes} node(s)")
    cluster = make_cluster(sc.nodes, tgt, scale, sc.env, seed, ec2, ec2_endpoint,
                           instance_type=sc.instance_type, runtime=runtime,
                           ip_family=sc.vpc_family)
    result.params.update(runtime_params(cluster.runtime))
    # The cluster's history: its nemesis records every fault there, the watch the rest.
    history = cluster.history
    watch = sampler = ctx = None
    liveness: list[dict] = []
    stalls = StallMeter(scale).start()
    try:
        _start(cluster)
        result.params["run_id"] = cluster.fabric.rid  # names its namespaces, files, processes
        if strict_leaks is None:
            strict_leaks = os.environ.get(STRICT_LEAKS_ENV) == "1"
        cooldown = required_ip_cooldown(sc.env, scale)
        result.params["strict_leaks"] = strict_leaks
        watch = Watch(cluster.fabric, history, leak_grace=max(5.0, 60 * scale),
                      ip_cooldown=cooldown, strict_leaks=strict_leaks).start()
        sampler = DaemonSampler(cluster, history, observe=tgt.observe).start()
        ctx = Ctx(cluster, watch, seed, profile, scale, duration, on_step, sampler=sampler,
                  env=sc.env)
        result.started = started = time.time()
        history.info(SCENARIO, "start", {"scenario": sc.name, "profile": profile, "seed": seed})
        say(f"{sc.name} [{profile}]: running")
        try:
            sc.fn(ctx)
            # Late effects (a route withdrawn, a probe timing out) still count.
            ctx.run_for(observe)
        except NotExposed as e:
            history.info(SCENARIO, "not-exposed", {"what": str(e)})
            ctx.run_for(observe)
        except Liveness as e:
            liveness.append(e.record())
            history.info(SCENARIO, "liveness", {"subject": e.subject, "what": e.what})
        except Precondition as e:
            result.precondition = str(e)
            if isinstance(e, TooSlow):
                result.too_slow = str(e)
            history.info(SCENARIO, "precondition", {"what": str(e)})
        except TargetGone as e:  # the build freed what the fault was aimed at: set-up lost
            result.precondition = str(e)
            history.info(SCENARIO, "precondition", {"what": str(e)})
        except ScenarioFailed as e:
            result.error = str(e)
        except Exception as e:  # noqa: BLE001 - a broken part is reported, then torn down
            import traceback

            result.error = f"{type(e).__name__}: {e}"
            history.info(SCENARIO, "crash", {"traceback": traceback.format_exc()[-4000:]})
        if ctx.schedule:
            history.info(SCENARIO, "schedule", {"seed": seed, "operations": ctx.schedule})
        history.info(SCENARIO, "end", {"error": result.error})
        _collect(result, ctx, cluster)
    except Liveness as e:  # the build's daemons never became ready: nothing else ran
        liveness.append(e.record())
    finally:
        if sampler is not None:
            sampler.stop()
        if watch is not None:
            watch.stop()
        stalls.stop()
        say(f"{sc.name} [{profile}]: tearing down")
        cluster.close()
    _judge(result, watch, history, liveness + (sampler.liveness if sampler else []), stalls)
    result.seconds = round(time.monotonic() - t0, 2)
    return result


def _start(cluster) -> None:
    """Start the cluster; a daemon under test that never becomes ready is the build's
    liveness violation (the kit and the machine are up by then), not an error."""
    from cnikit.errors import DaemonNotReady

    try:
        cluster.start()
    except DaemonNotReady as e:
        raise Liveness("daemon", "a daemon never became ready", {"daemon": str(e)[:300]}) from None


def _judge(result: RunResult, watch, history: History, liveness: list[dict],
           stalls: StallMeter | None = None) -> None:
    """The verdict: an invariant or liveness violation -> "violation" (unless the machine
    was too slow for the time scale just before it: "inconclusive", cnikit.check.stall);
    else a case a checker could not judge on this machine or an unmet precondition ->
    "inconclusive"; else a kit failure -> "error"; else
    "holds"."""
    pods = {}
    entries = history.entries()
    for e in entries:
        if e["process"] == CLIENT and e["type"] == "ok" and e["f"] == "pod-add":
            pods[e["value"]["pod"]] = e["value"]
    inv = watch.invariants if watch is not None else None
    found = [v.to_json() for v in inv.violations()] if inv is not None else []
    seen: set = set()
    liveness = [r for r in liveness if not ((r["subject"], r["detail"]["what"]) in seen
                                            or seen.add((r["subject"], r["detail"]["what"])))]
    result.violations = [_describe(v, pods) for v in found + liveness]
    result.warnings = [v.to_json() for v in inv.warnings()] if inv is not None else []
    result.history = entries
    if stalls is not None:
        result.params["stall"] = {"worst_s": round(stalls.worst, 3),
                                  "bound_s": round(stalls.bound, 3), "over": len(stalls.stalls)}
    slow = run_too_slow(stalls, result.violations, result.started,
                        inv.unjudged() if inv is not None else [])
    if slow:
        result.too_slow = slow
        result.verdict, result.precondition = "inconclusive", slow
    elif result.violations:
        result.too_slow = None  # a scenario's lost race (TooSlow) is outranked by a violation
        result.verdict = "violation"
    elif result.precondition:
        result.verdict = "inconclusive"
    else:
        result.verdict = "error" if result.error else "holds"
    result.exercised = result.verdict in ("holds", "violation")


IMDS_REQUESTS_KEPT = 20_000


def _collect(result: RunResult, ctx: Ctx, cluster) -> None:
    """Everything the report needs, read while the parts are still up: EC2 (the gate), the
    IMDS's events and request log, and the build's [observe] ports when declared."""
    result.steps = ctx.steps
    result.schedule = ctx.schedule
    try:
        result.imds_events = ctx.imds.events()
    except Exception as e:  # noqa: BLE001
        result.imds_events = [{"error": str(e)}]
    try:
        page = ctx.imds.requests(since=0, limit=IMDS_REQUESTS_KEPT)
        result.imds_requests = [r for r in page["requests"] if not r.get("observer")]
    except Exception as e:  # noqa: BLE001
        result.imds_requests = [{"error": str(e)}]
    result.audit = [_jsonable(r) for r in cluster.cloud.gate.audit.records()]
    from cnikit.check.exposure import judge

    names = {n.instance_id: n.name for n in cluster.fabric.nodes}
    entries = ctx.history.entries()  # a copy of the whole history: taken once
    result.exposure = judge(entries, result.imds_requests,
                            cluster.cloud.gate.faults.reached(), names)
    owners = cluster.cloud.gate.owners()
    from cnikit.check import cost
    from cnikit.cloud.after_call import INSTANCE_HEADER, caller_instance

    throttled = [{"time": t.time, "action": t.action,
                  "instance_id": caller_instance({INSTANCE_HEADER: t.named} if t.named else None,
                                                 t.source, owners)}
                 for t in cluster.cloud.gate.audit.throttled()]
    result.cost = cost.judge(result.audit, entries, names, cluster.scale,
                             throttled)
    sampler = ctx.sampler
    for n, node in enumerate(cluster.fabric.nodes):
        enis = [{"eni_id": e.eni_id, "mac": e.mac, "device_index": e.device_index,
                 "primary_ip": e.primary_ip} for e in owners.enis.values()
                if e.instance_id == node.instance_id]
        result.nodes.append({"index": n, "name": node.name, "instance_id": node.instance_id,
                             "enis": enis})
        if sampler is None or not sampler.introspection:
            continue
        from cnikit.scenarios.blackbox import introspect

        try:
            result.daemon_views[node.name] = sampler.view(n)
        except (OSError, ValueError) as e:
            result.daemon_views[node.name] = {"error": str(e)}
            continue
        try:  # the reference daemon's decisions (an extra path of its introspection port)
            events = introspect(node.ns.path, sampler.introspection, "/v1/events")
            result.daemon_events[node.name] = events if isinstance(events, list) else []
        except (OSError, ValueError):
            pass


def write_report(out_dir: str | Path, result: RunResult) -> dict:
    """report.json and report.html (cnikit.report) into out_dir."""
    from cnikit.report import write_report as write

    return write(out_dir, result)
