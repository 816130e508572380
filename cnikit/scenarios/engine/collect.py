"""What a run's report needs, read from its parts (the gate, the IMDS, the build's
[observe] ports) before they are torn down."""

from __future__ import annotations

import dataclasses

from cnikit.scenarios.engine.ctx import Ctx
from cnikit.scenarios.engine.result import RunResult


def _jsonable(x):
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    if isinstance(x, dict):
        return x
    return getattr(x, "__dict__", str(x))


IMDS_REQUESTS_KEPT = 20_000


def collect(result: RunResult, ctx: Ctx, cluster) -> None:
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

    throttled = []
    for t in cluster.cloud.gate.audit.throttled():
        caller = caller_instance({INSTANCE_HEADER: t.named} if t.named else None, t.source,
                                 owners)
        # Per node by the node the call acted on: an operator's calls come from one place
        # for every node (cnikit.cloud.acted_on); a Describe names none, so its caller.
        throttled.append({"time": t.time, "action": t.action,
                          "instance_id": t.acted_on or caller, "caller": caller})
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
