"""One sentence per violation: what broke, when, for which pod and IP, and the EC2 change
that explains it when the record holds one ("... because IP 10.0.1.7 was released by ENI
eni-1 (UnassignPrivateIpAddresses at t=+11.90s)")."""

from __future__ import annotations

from cnikit.report.timeline import Timeline

# An EC2 change this long after the symptom's first sight still counts as its cause: the
# monitor records ownership asynchronously, the prober fails a pod within milliseconds.
SLACK = 1.0


def rel(tl: Timeline, t: float | None) -> str:
    return "end" if t is None else f"t=+{t - tl.t0:.2f}s"


def _pod(tl: Timeline, name: str):
    return next((p for p in tl.pods if p.name == name), None)


def cause(tl: Timeline, ip: str, instance: str | None, at: float) -> str | None:
    """The last EC2 change of ip's owner up to `at` that took it away from `instance`."""
    changes = [c for c in tl.ip_owners.get(ip, []) if c[0] <= at + SLACK]
    for t, eni, inst in reversed(changes):
        if instance is not None and inst == instance:
            return None
        prev = _previous_owner(tl, ip, t)
        call = _call(tl, ip, t)
        how = f" ({call['action']} at {rel(tl, call['time'])})" if call else f" at {rel(tl, t)}"
        if eni is None:
            by = f"by ENI {prev[0]}" if prev and prev[0] else "in EC2"
            return f"IP {ip} was released {by}{how}"
        return (f"IP {ip} was moved to ENI {eni} of {inst}"
                + (f" from ENI {prev[0]}" if prev and prev[0] else "") + how)
    return None


def _previous_owner(tl: Timeline, ip: str, t: float):
    prev = None
    for c in tl.ip_owners.get(ip, []):
        if c[0] >= t:
            break
        prev = (c[1], c[2])
    return prev


def _call(tl: Timeline, ip: str, t: float) -> dict | None:
    """The successful mutating EC2 call that changed ip's owner, just before t."""
    best = None
    for r in tl.calls:
        if ip in (r.get("ips") or []) and r.get("outcome") == "ok" and r["time"] <= t + 0.05:
            best = r
    return best


def sentence(tl: Timeline, v: dict) -> str:
    kind, subject, d = v.get("kind"), v.get("subject"), v.get("detail") or {}
    since, until = v.get("since"), v.get("until")
    span = f"at {rel(tl, since)}" + (f" until {rel(tl, until)}" if until else " (still at the end)")
    if kind == "unreachable":
        pod = _pod(tl, subject)
        ip = pod.ip if pod else "?"
        s = f"pod {subject} ({ip}) lost connectivity {span}"
        why = cause(tl, ip, pod.instance_id if pod else None, since) if pod else None
        peers = d.get("failing_pairs")
        if peers:
            s += f", failing with {peers} peer(s)"
        return s + (f" because {why}" if why else "")
    if kind == "ip-not-owned":
        ip = d.get("ip", "?")
        held = d.get("held_by")
        s = (f"pod {subject}'s IP {ip} was not held by its node {d.get('node')} in EC2 {span}"
             + (f" (held by {held})" if held else " (held by no instance)"))
        why = cause(tl, ip, d.get("node"), since)
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
    if not violations:
        lines.insert(0, f"every invariant held over {tl.t1 - tl.t0:.1f}s "
                        f"({len(tl.pods)} pods, {len(tl.enis)} ENIs)")
    return lines
