"""What EC2 did to an address, for the root-cause chain (cnikit.report.cause): the change that
took it from the ENI holding it, the call that made it, and the links that say them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cnikit.report.timeline import Timeline, sorted_ips
from cnikit.report.words import rel, shorts

# An EC2 change this long after the symptom's first sight still counts as its cause: the
# monitor records ownership asynchronously, the prober fails a pod within milliseconds.
SLACK = 1.0
RELEASES = ("UnassignPrivateIpAddresses", "DetachNetworkInterface", "DeleteNetworkInterface")


@dataclass
class Change:
    """The EC2 change that took `ip` from the ENI holding it."""
    time: float
    ip: str
    eni: str
    instance: str | None
    to_eni: str | None  # None: released to no one
    to_instance: str | None
    to_primary: bool
    call: dict | None  # the gate's audit record of the call that made it
    then: tuple | None  # released, then given to (time, eni, instance, primary)


def ec2_change(tl: Timeline, ip: str, at: float, since: float | None = None) -> Change | None:
    """The first EC2 change after `since` (the pod's start) up to `at` that took ip away from
    the ENI holding it then."""
    changes = tl.ip_owners.get(ip, [])
    since = tl.t0 if since is None else since
    held = None
    for c in changes:
        if c[0] <= since:
            held = c
    later = [c for c in changes if since < c[0] <= at + SLACK]
    if held is None and later:
        held, later = later[0], later[1:]
    if held is None or held[1] is None:
        return None
    for n, (t, eni, inst, primary) in enumerate(later):
        if eni == held[1]:
            continue
        call = _call(tl, ip, t, released=eni is None)
        nxt = next((c for c in later[n + 1:] if c[1] is not None), None) if eni is None else None
        return Change(t, ip, held[1], held[2], eni, inst, primary, call, nxt)
    return None


def _call(tl: Timeline, ip: str, t: float, released: bool = True) -> dict | None:
    """The successful mutating EC2 call that made the change recorded at t (the monitor
    records a little after the call returns)."""
    best = None
    for r in tl.calls:
        if (ip in (r.get("ips") or []) and r.get("outcome") == "ok" and r["time"] <= t + 0.05
                and (r.get("action") in RELEASES) == released):
            best = r
    return best


def taken_before(tl: Timeline, ip: str, pod) -> Change | None:
    """The last EC2 change before the pod's ADD that took `ip` from the pod's node (the
    daemon then handed out an address EC2 no longer gave it), or None."""
    if pod is None or pod.start is None or not pod.instance_id:
        return None
    found, prev = None, None
    changes = [c for c in tl.ip_owners.get(ip, []) if c[0] <= pod.start]
    for n, c in enumerate(changes):
        if prev is not None and prev[2] == pod.instance_id and c[2] != pod.instance_id:
            nxt = next((x for x in changes[n + 1:] if x[1] is not None), None) \
                if c[1] is None else None
            found = Change(c[0], ip, prev[1], prev[2], c[1], c[2], c[3],
                           _call(tl, ip, c[0], released=c[1] is None), nxt)
        prev = c
    if found is None or (changes and changes[-1][2] == pod.instance_id):
        return None  # back with the node by the ADD: not why the pod's IP is not its node's
    return found


def ec2_text(tl: Timeline, c: Change) -> str:
    call = c.call
    how = f" ({call['action']} at {rel(tl, call['time'])})" if call else f" at {rel(tl, c.time)}"
    if c.to_eni is None:
        text = f"IP {c.ip} was removed from ENI {c.eni} in EC2{how}"
        if c.then is not None:
            text += f", then given to ENI {c.then[1]} of {c.then[2]} at {rel(tl, c.then[0])}"
        return text
    return f"IP {c.ip} was moved from ENI {c.eni} to ENI {c.to_eni} of {c.to_instance}{how}"


def _reaction(tl: Timeline, c: Change) -> str:
    if c.to_eni is None:
        text = f"EC2: {c.ip} held by no instance"
        if c.then is not None:
            what = "as its primary IP" if c.then[3] else ""
            text += (f", then by ENI {c.then[1]} of {tl.node_of(c.then[2]) or c.then[2]}"
                     f"{' ' + what if what else ''} from {rel(tl, c.then[0])}")
        return text
    what = " as its primary IP" if c.to_primary else ""
    return (f"EC2: {c.ip} moved from ENI {c.eni} to ENI {c.to_eni} of "
            f"{tl.node_of(c.to_instance) or c.to_instance}{what}")


def call_link(by: str, call: dict, node: str | None) -> dict:
    """node: the daemon's node that made the call (None: the scenario made it)."""
    addresses = (call.get("ips") or []) + (call.get("prefixes") or [])
    return {"step": "ec2-call", "time": call["time"],
            "text": f"{by} called {call['action']} on {call.get('eni_id')} for {shorts(addresses)}",
            "facts": {"by": "daemon" if node else "scenario", "node": node,
                      "action": call["action"], "eni": call.get("eni_id"),
                      "addresses": sorted_ips(addresses)}}


def ec2_link(tl: Timeline, c: Change) -> dict:
    return {"step": "ec2", "time": c.time, "text": _reaction(tl, c),
            "facts": {"ip": c.ip, "from_eni": c.eni, "to_eni": c.to_eni,
                      "to_node": tl.node_of(c.to_instance) or c.to_instance}}
