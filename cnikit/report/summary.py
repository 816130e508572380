"""One sentence per violation: what broke, when, for which pod and IP, the EC2 change that
explains it when the record holds one ("... because IP 10.0.1.7 was removed from ENI eni-1 in
EC2 (UnassignPrivateIpAddresses at t=+11.90s)"), and the chain back to the first cause the record
shows ("; root cause: fault IMDS stale ... -> IMDS ... -> the daemon ... -> ...", see
cnikit.report.cause)."""

from __future__ import annotations

from cnikit.report.cause import chain, ec2_change, ec2_text, one_line, rel
from cnikit.report.timeline import Timeline

__all__ = ["cause", "momentary", "rel", "root", "sentence", "summarize"]

# Blame shorter than one probe round: the reachability checker blames one side of the first
# failing pair until the next pair shows which pod is lost.
MOMENT = 0.1


def momentary(v: dict) -> bool:
    until, since = v.get("until"), v.get("since")
    return (v.get("kind") == "unreachable" and until is not None and since is not None
            and until - since < MOMENT)


def _pod(tl: Timeline, name: str):
    return next((p for p in tl.pods if p.name == name), None)


def cause(tl: Timeline, ip: str, at: float, since: float | None = None) -> str | None:
    """The EC2 change that took ip away from the ENI holding it since `since`, in words."""
    c = ec2_change(tl, ip, at, since)
    return ec2_text(tl, c) if c is not None else None


def root(tl: Timeline, v: dict) -> str:
    """"; root cause: <the chain up to the EC2 call>" when the record shows one (the EC2 call,
    its effect and the symptom are said before it)."""
    links = [x for x in chain(tl, v) if x["step"] in ("fault", "imds", "daemon")]
    return "; root cause: " + one_line(tl, links) if links else ""


def sentence(tl: Timeline, v: dict) -> str:
    kind, subject, d = v.get("kind"), v.get("subject"), v.get("detail") or {}
    since, until = v.get("since"), v.get("until")
    span = f"at {rel(tl, since)}" + (f" until {rel(tl, until)}" if until else " (still at the end)")
    if momentary(v):
        return (f"pod {subject} was blamed for a moment at {rel(tl, since)} (one side of the "
                "first failing pair, until the next pair showed which pod was lost)")
    if kind == "unreachable":
        pod = _pod(tl, subject)
        ip = pod.ip if pod else "?"
        s = f"pod {subject} ({ip}) lost connectivity {span}"
        why = cause(tl, ip, since, pod.start) if pod else None
        peers = d.get("failing_pairs")
        if peers:
            s += f", failing with {peers} peer(s)"
            if not why and d.get("peers"):
                names = d["peers"][:3]
                s += f" ({', '.join(names)}{', ...' if peers > len(names) else ''})"
        return s + (f" because {why}" if why else "") + root(tl, v)
    if kind == "ip-not-owned":
        ip = d.get("ip", "?")
        held = d.get("held_by")
        s = (f"pod {subject}'s IP {ip} was not held by its node {d.get('node')} in EC2 {span}"
             + (f" (held by {held})" if held else " (held by no instance)"))
        pod = _pod(tl, subject)
        why = cause(tl, ip, since, pod.start if pod else None)
        return s + (f" because {why}" if why else "") + root(tl, v)
    if kind == "shared-ip":
        pods = ", ".join(d.get("pods") or []) or "?"
        s = f"IP {subject} was given to more than one pod ({pods}) {span}"
        if d.get("answered_by"):
            s += f"; probes answered by {', '.join(d['answered_by'])}"
        return s + root(tl, v)
    return f"{kind} on {subject} {span}"


def summarize(tl: Timeline, verdict: str, violations: list[dict], warnings: list[dict]) -> list[str]:
    lines = [sentence(tl, v) for v in violations]
    if warnings:
        kinds: dict[str, int] = {}
        for w in warnings:
            kinds[w.get("kind", "?")] = kinds.get(w.get("kind", "?"), 0) + 1
        lines.append("warnings: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    if not violations and verdict != "error":
        lines.insert(0, f"every invariant held over {tl.t1 - tl.t0:.1f}s "
                        f"({len(tl.pods)} pods, {len(tl.enis)} ENIs)")
    return lines
