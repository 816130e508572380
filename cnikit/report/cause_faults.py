"""The faults behind a chain (cnikit.report.cause): the faults in effect on a node when it
acted, the scenario's own EC2 operations that made a call or took addresses a stale read
still listed, and the links that say them.
"""

from __future__ import annotations

from cnikit.report.cause_ec2 import Change
from cnikit.report.timeline import Span, Timeline, nemesis_fields
from cnikit.report.words import rel, shorts

# A nemesis entry this close to an EC2 call that names its addresses or ENI made the call.
NEMESIS_NEAR = 1.0


def _targets(tl: Timeline, f: Span, instance: str | None, eni: str | None) -> bool:
    """Whether a fault's target covers this node (or ENI): an untargeted fault covers all."""
    d = f.detail or {}
    target = d.get("target") if isinstance(d.get("target"), dict) else d
    inst = target.get("instance_id") or target.get("instance")
    if inst and instance and inst != instance:
        return False
    t_eni = target.get("eni_id") or target.get("eni")
    if t_eni and eni and t_eni != eni:
        return False
    mac = target.get("mac")
    if mac and eni and tl.mac_eni.get(mac) not in (None, eni):
        return False
    return True


def active_faults(tl: Timeline, t: float, instance, eni, read: dict | None = None) -> list[Span]:
    ids = set(read.get("faults") or []) if read else set()
    out = []
    for f in tl.faults:
        if f.instant:
            continue
        on = f.start <= t <= f.end or str((f.detail or {}).get("id")) in ids
        if on and _targets(tl, f, instance, eni):
            out.append(f)
    # The scenario's note of an IMDS fault and the IMDS's own record of it are one fault.
    imds = [f.start for f in out if f.source == "imds"]
    return [f for f in out if not (f.source == "nemesis" and f.label.startswith("imds")
                                   and any(abs(f.start - t) < 0.5 for t in imds))]


def fault_link(tl: Timeline, f: Span) -> dict:
    end = "" if f.end >= tl.t1 else f" until {rel(tl, f.end)}"
    return {"step": "fault", "time": f.start, "text": f"fault: {f.label}{end}",
            "facts": {"by": f.source, "label": f.label}}


def nemesis_text(e: dict) -> str:
    v = e.get("value") if isinstance(e.get("value"), dict) else {}
    parts = []
    for k, x in nemesis_fields(v).items():
        if isinstance(x, list):
            x = shorts(x) if all(isinstance(i, str) and i[:1].isdigit() for i in x) else ", ".join(map(str, x))
        parts.append(f"{k} {x}")
    return e.get("f", "fault") + (f" ({'; '.join(parts)})" if parts else "")


def actor_link(actor: dict, acted: float) -> dict:
    # The scenario logs its action once the call has returned: it stands at the call.
    return {"step": "fault", "time": min(actor["time"], acted),
            "text": f"fault: the scenario's {nemesis_text(actor)} (not the daemon)",
            "facts": {"by": "scenario", "op": actor.get("f"), "acted": True}}


def _mentions(e: dict, ips: set[str], enis: set[str]) -> set[str]:
    v = e.get("value") if isinstance(e.get("value"), dict) else {}
    named: set[str] = set()
    for x in nemesis_fields(v).values():
        for i in x if isinstance(x, list) else [x]:
            if isinstance(i, str):
                named.add(i)
    return (named & ips) | (named & enis)


def nemesis_actor(tl: Timeline, c: Change) -> dict | None:
    """The scenario's own EC2 operation that made the call, when one names its addresses
    (an IMDS fault naming them made no EC2 call)."""
    if c.call is None:
        return None
    for e in tl.nemesis:
        if e.get("type") in ("start", "info") and str(e.get("f", "")).startswith("ec2-") \
                and abs(e["time"] - c.call["time"]) <= NEMESIS_NEAR \
                and c.ip in _mentions(e, {c.ip}, set()) and _on_eni(e, c.call.get("eni_id")):
            return e
    return None


def _on_eni(e: dict, eni: str | None) -> bool:
    """Whether the nemesis entry's call was made on `eni` (every EC2 operation names the ENI
    it calls on): a node's own release right before another node takes the address is the
    node's call, not the take's."""
    v = e.get("value") if isinstance(e.get("value"), dict) else {}
    target = v.get("target") if isinstance(v.get("target"), dict) else v
    named = target.get("eni")
    return not (named and eni and named != eni)


def nemesis_on(tl: Timeline, read: dict, c: Change) -> list[dict]:
    """Instant actions of the scenario before the read that took addresses the read still
    listed (why a stale list looked plausible)."""
    stale = read.get("stale") or set()
    out = []
    for e in tl.nemesis:
        if e["time"] <= read["time"] and e.get("type") in ("start", "info") and stale \
                and _mentions(e, stale, set()):
            out.append(e)
    return out[-2:]
