"""One sentence per violation: what broke, when, for which pod and IP, and the EC2 change
that explains it when the record holds one ("... because IP 10.0.1.7 was released by ENI
eni-1 (UnassignPrivateIpAddresses at t=+11.90s)")."""

from __future__ import annotations

from cnikit.report.timeline import Timeline

# An EC2 change this long after the symptom's first sight still counts as its cause: the
# monitor records ownership asynchronously, the prober fails a pod within milliseconds.
SLACK = 1.0
# Blame shorter than one probe round: the reachability checker blames one side of the first
# failing pair until the next pair shows which pod is lost.
MOMENT = 0.1


def momentary(v: dict) -> bool:
    until, since = v.get("until"), v.get("since")
    return (v.get("kind") == "unreachable" and until is not None and since is not None
            and until - since < MOMENT)


def rel(tl: Timeline, t: float | None) -> str:
    return "end" if t is None else f"t=+{t - tl.t0:.2f}s"


def _pod(tl: Timeline, name: str):
    return next((p for p in tl.pods if p.name == name), None)


def cause(tl: Timeline, ip: str, at: float, since: float | None = None) -> str | None:
    """The first EC2 change after `since` (the pod's start) up to `at` that took ip away from
    the ENI holding it then, and what became of it next."""
    changes = tl.ip_owners.get(ip, [])
    since = tl.t0 if since is None else since
    held = None
    for t, eni, inst in changes:
        if t <= since:
            held = (eni, inst)
    later = [c for c in changes if since < c[0] <= at + SLACK]
    if held is None and later:
        held = (later[0][1], later[0][2])
        later = later[1:]
    if held is None or held[0] is None:
        return None
    for n, (t, eni, inst) in enumerate(later):
        if eni == held[0]:
            continue
        call = _call(tl, ip, t, released=eni is None)
        how = f" ({call['action']} at {rel(tl, call['time'])})" if call else f" at {rel(tl, t)}"
        if eni is None:
            text = f"IP {ip} was released by ENI {held[0]}{how}"
            nxt = next((c for c in later[n + 1:] if c[1] is not None), None)
            if nxt is not None:
                text += f", then given to ENI {nxt[1]} of {nxt[2]} at {rel(tl, nxt[0])}"
            return text
        return f"IP {ip} was moved from ENI {held[0]} to ENI {eni} of {inst}{how}"
    return None


RELEASES = ("UnassignPrivateIpAddresses", "DetachNetworkInterface", "DeleteNetworkInterface")


def _call(tl: Timeline, ip: str, t: float, released: bool = True) -> dict | None:
    """The successful mutating EC2 call that made the change recorded at t (the monitor
    records a little after the call returns)."""
    best = None
    for r in tl.calls:
        if (ip in (r.get("ips") or []) and r.get("outcome") == "ok" and r["time"] <= t + 0.05
                and (r.get("action") in RELEASES) == released):
            best = r
    return best


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
        return s + (f" because {why}" if why else "")
    if kind == "ip-not-owned":
        ip = d.get("ip", "?")
        held = d.get("held_by")
        s = (f"pod {subject}'s IP {ip} was not held by its node {d.get('node')} in EC2 {span}"
             + (f" (held by {held})" if held else " (held by no instance)"))
        pod = _pod(tl, subject)
        why = cause(tl, ip, since, pod.start if pod else None)
        return s + (f" because {why}" if why else "")
    if kind == "shared-ip":
        pods = ", ".join(d.get("pods") or []) or "?"
        s = f"IP {subject} was given to more than one pod ({pods}) {span}"
        if d.get("answered_by"):
            s += f"; probes answered by {', '.join(d['answered_by'])}"
        return s
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
