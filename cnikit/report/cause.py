"""The chain from a violation back to the first cause the record shows, built from the run's
record alone so that it holds for any build under test:

    fault active -> what IMDS served the node at its last read before the daemon acted ->
    the daemon's action (its recorded decision, when the build logs them, and its EC2 call)
    -> EC2's reaction -> the symptom.

    links = chain(tl, violation)   # [{"step", "time", "text"}], first cause first
    one_line(tl, links)            # "t=+2.00s fault: IMDS stale ... -> ... -> t=+10.20s pod p1 went dark"

A link is left out when the record has nothing for it (a build without a decision log, a run
without a per-request IMDS log); the chain never guesses. A link may carry "facts", what its
text says as data (addresses, counts, who acted), from which cnikit.report.rootcause words
the root cause.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from cnikit.check.checkers import checker_of
from cnikit.report.timeline import Span, Timeline, nemesis_fields, sorted_ips

# An EC2 change this long after the symptom's first sight still counts as its cause: the
# monitor records ownership asynchronously, the prober fails a pod within milliseconds.
SLACK = 1.0
# A nemesis entry this close to an EC2 call that names its addresses or ENI made the call.
NEMESIS_NEAR = 1.0
RELEASES = ("UnassignPrivateIpAddresses", "DetachNetworkInterface", "DeleteNetworkInterface")
ARROW = " \u2192 "


def rel(tl: Timeline, t: float | None) -> str:
    return "end" if t is None else f"t={t - tl.t0:+.2f}s"


def short(ip: str) -> str:
    """10.0.1.7 -> .7 and 10.0.1.16/28 -> .16/28: enough to tell IPs of one subnet apart."""
    head, _, mask = ip.partition("/")
    return "." + head.rsplit(".", 1)[-1] + (f"/{mask}" if mask else "")


def shorts(ips, limit: int = 8) -> str:
    ips = sorted_ips(ips)
    more = f" and {len(ips) - limit} more" if len(ips) > limit else ""
    return " ".join(short(i) for i in ips[:limit]) + more


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


def ec2_text(tl: Timeline, c: Change) -> str:
    call = c.call
    how = f" ({call['action']} at {rel(tl, call['time'])})" if call else f" at {rel(tl, c.time)}"
    if c.to_eni is None:
        text = f"IP {c.ip} was removed from ENI {c.eni} in EC2{how}"
        if c.then is not None:
            text += f", then given to ENI {c.then[1]} of {c.then[2]} at {rel(tl, c.then[0])}"
        return text
    return f"IP {c.ip} was moved from ENI {c.eni} to ENI {c.to_eni} of {c.to_instance}{how}"


# ---- the chain --------------------------------------------------------------------------

def chain(tl: Timeline, v: dict) -> list[dict]:
    """The links from the first visible cause to the violation `v`, oldest first."""
    key = ("chain", v.get("kind"), v.get("subject"), v.get("since"))
    if key not in tl.cache:
        tl.cache[key] = _chain(tl, v)
    return tl.cache[key]


def _chain(tl: Timeline, v: dict) -> list[dict]:
    ip, pod = _subject(tl, v)
    since = v.get("since")
    if ip is None or not isinstance(since, (int, float)):
        return []
    change = ec2_change(tl, ip, since, pod.start if pod else None)
    links: list[dict] = []
    node_inst = (pod.instance_id if pod else None) or (change.instance if change else None)
    if change is None:
        taken = _taken_before(tl, ip, pod)
        if taken is not None:
            return _handed_out(tl, v, ip, pod, taken)
        for f in _active(tl, since, node_inst, None):
            links.append(_fault_link(tl, f))
        links.append(_symptom(tl, v, ip, pod))
        return links

    actor = _nemesis_actor(tl, change)
    acted = change.call["time"] if change.call else change.time
    # Who acted: the node whose ENI the call was made on (for a move, the taker's node).
    eni = (change.call or {}).get("eni_id") or change.eni
    acting = replace(change, eni=eni, instance=tl.eni_instance.get(eni, change.instance))
    decisions: list[dict] = []
    dropped = None
    node = tl.node_of(acting.instance)
    if actor is None:
        # Two pods on one IP: what the daemon decided about it up to the second one's ADD
        # (a sweep and a re-add after the EC2 change are how it got there).
        until = max(acted, since) if v.get("kind") == "shared-ip" else acted
        decisions = _decisions(tl, node, acting, pod.start if pod else tl.t0, until)
        dropped = _dropped_seen(tl, acting, pod.start if pod else tl.t0, acted)
        first = min([d["time"] for d in decisions] + ([dropped] if dropped else []) + [acted])
    else:
        first = actor["time"]
    read = _imds_read(tl, acting, first) if actor is None else None

    # 1. the faults: active where the daemon read IMDS (or acted), and the scenario's own
    # EC2 actions on what that read still listed.
    if actor is not None:
        links.append(_actor_link(actor, acted))
    else:
        at = read["time"] if read else first
        for f in _active(tl, at, acting.instance, acting.eni, read):
            links.append(_fault_link(tl, f))
        if read is not None:
            for e in _nemesis_on(tl, read, acting):
                links.append({"step": "fault", "time": e["time"],
                              "text": f"fault: the scenario's {_nemesis_text(e)}, "
                                      "while IMDS still listed them",
                              "facts": {"by": "scenario", "op": e.get("f")}})
    # 2. what IMDS served the node
    if read is not None:
        links.append(_imds_link(read))
    # 3. the daemon's action
    who = f"the daemon on {node or acting.instance or 'its node'}"
    if actor is None:
        for d in decisions:
            if d["kind"] == "release" and change.call is not None:
                continue  # the EC2 call below says it
            links.append(_decision_link(who, node or acting.instance, d))
        if not decisions and dropped is not None:
            links.append({"step": "daemon", "time": dropped,
                          "text": f"{who} dropped {change.ip} from its datastore "
                                  "(seen in its view)",
                          "facts": {"node": node or acting.instance, "kind": "dropped",
                                    "addresses": [change.ip]}})
    if change.call is not None:
        links.append(_call_link(who if actor is None else "the scenario", change.call,
                                None if actor is not None else node or acting.instance))
    # 4. EC2's reaction
    links.append(_ec2_link(tl, change))
    # 5. the symptom
    links.append(_symptom(tl, v, ip, pod))
    links.sort(key=lambda x: (x["time"] if x["time"] is not None else tl.t1))
    return links


def _taken_before(tl: Timeline, ip: str, pod) -> Change | None:
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


def _handed_out(tl: Timeline, v: dict, ip: str, pod, taken: Change) -> list[dict]:
    """The chain of a pod given an address EC2 had already taken from its node: who took
    it, what IMDS served the node before the ADD, the ADD itself, the symptom."""
    links: list[dict] = []
    actor = _nemesis_actor(tl, taken)
    node = tl.node_of(pod.instance_id) or pod.instance_id
    who = f"the daemon on {node}"
    if actor is not None:
        links.append(_actor_link(actor, taken.call["time"]))
    elif taken.call is not None:
        caller = tl.eni_instance.get(taken.call.get("eni_id"))
        by = who if caller == pod.instance_id else \
            f"the daemon on {tl.node_of(caller) or 'another node'}"
        links.append(_call_link(by, taken.call, tl.node_of(caller) or caller))
    links.append(_ec2_link(tl, taken))
    read = _imds_read(tl, taken, pod.start)
    for f in _active(tl, read["time"] if read else pod.start, pod.instance_id, taken.eni, read):
        links.append(_fault_link(tl, f))
    if read is not None:
        links.append(_imds_link(read))
    for d in _decisions(tl, tl.node_of(pod.instance_id), taken, taken.time, pod.start):
        links.append(_decision_link(who, node, d))
    links.append({"step": "daemon", "time": pod.start,
                  "text": f"{who} gave {ip} to pod {pod.name} (its CNI ADD), an address EC2 "
                          "no longer gave the node",
                  "facts": {"node": node, "kind": "cni-add", "addresses": [ip],
                            "pod": pod.name}})
    links.append(_symptom(tl, v, ip, pod))
    links.sort(key=lambda x: (x["time"] if x["time"] is not None else tl.t1))
    return links


def _actor_link(actor: dict, acted: float) -> dict:
    # The scenario logs its action once the call has returned: it stands at the call.
    return {"step": "fault", "time": min(actor["time"], acted),
            "text": f"fault: the scenario's {_nemesis_text(actor)} (not the daemon)",
            "facts": {"by": "scenario", "op": actor.get("f"), "acted": True}}


def _call_link(by: str, call: dict, node: str | None) -> dict:
    """node: the daemon's node that made the call (None: the scenario made it)."""
    addresses = (call.get("ips") or []) + (call.get("prefixes") or [])
    return {"step": "ec2-call", "time": call["time"],
            "text": f"{by} called {call['action']} on {call.get('eni_id')} for {shorts(addresses)}",
            "facts": {"by": "daemon" if node else "scenario", "node": node,
                      "action": call["action"], "eni": call.get("eni_id"),
                      "addresses": sorted_ips(addresses)}}


def _imds_link(read: dict) -> dict:
    return {"step": "imds", "time": read["time"], "text": read["text"], "facts": read["facts"]}


def _decision_link(who: str, node: str | None, d: dict) -> dict:
    return {"step": "daemon", "time": d["time"], "text": f"{who}: {d['text']}",
            "facts": {"node": node, "kind": d["kind"], "addresses": d["addresses"],
                      "evicted": d["evicted"]}}


def _ec2_link(tl: Timeline, c: Change) -> dict:
    return {"step": "ec2", "time": c.time, "text": _reaction(tl, c),
            "facts": {"ip": c.ip, "from_eni": c.eni, "to_eni": c.to_eni,
                      "to_node": tl.node_of(c.to_instance) or c.to_instance}}


def one_line(tl: Timeline, links: list[dict]) -> str:
    return ARROW.join(f"{rel(tl, x['time'])} {x['text']}" if x.get("time") is not None
                      else x["text"] for x in links)


def to_json(tl: Timeline, links: list[dict]) -> list[dict]:
    return [{"step": x["step"], "time": x["time"],
             "at": rel(tl, x["time"]) if x.get("time") is not None else None, "text": x["text"],
             **({"facts": x["facts"]} if x.get("facts") else {})}
            for x in links]


def _subject(tl: Timeline, v: dict):
    d = v.get("detail") or {}
    if checker_of(v.get("kind") or "").subject_names == "ip":
        return v.get("subject"), None
    pod = next((p for p in tl.pods if p.name == v.get("subject")), None)
    ip = d.get("ip") or (pod.ip if pod else None)
    return ip, pod


def _symptom(tl: Timeline, v: dict, ip: str, pod) -> dict:
    kind, subject = v.get("kind"), v.get("subject")
    checker = checker_of(kind or "")
    # Else a checker that words its own evidence (early-reuse names the previous holder, when
    # it was deleted and the cooldown the reuse fell inside) says it better than its kind.
    text = checker.symptom(v, ip) or \
        f"{kind}: {(v.get('detail') or {}).get('what') or f'on {subject}'}"
    pods = list((v.get("detail") or {}).get("pods") or []) if checker.subject_names == "ip" \
        else [pod.name] if pod else []
    return {"step": "symptom", "time": v.get("since"), "text": text,
            "facts": {"kind": kind, "ip": ip, "pods": pods}}


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


# ---- the faults ------------------------------------------------------------------------

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


def _active(tl: Timeline, t: float, instance, eni, read: dict | None = None) -> list[Span]:
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


def _fault_link(tl: Timeline, f: Span) -> dict:
    end = "" if f.end >= tl.t1 else f" until {rel(tl, f.end)}"
    return {"step": "fault", "time": f.start, "text": f"fault: {f.label}{end}",
            "facts": {"by": f.source, "label": f.label}}


def _nemesis_text(e: dict) -> str:
    v = e.get("value") if isinstance(e.get("value"), dict) else {}
    parts = []
    for k, x in nemesis_fields(v).items():
        if isinstance(x, list):
            x = shorts(x) if all(isinstance(i, str) and i[:1].isdigit() for i in x) else ", ".join(map(str, x))
        parts.append(f"{k} {x}")
    return e.get("f", "fault") + (f" ({'; '.join(parts)})" if parts else "")


def _mentions(e: dict, ips: set[str], enis: set[str]) -> set[str]:
    v = e.get("value") if isinstance(e.get("value"), dict) else {}
    named: set[str] = set()
    for x in nemesis_fields(v).values():
        for i in x if isinstance(x, list) else [x]:
            if isinstance(i, str):
                named.add(i)
    return (named & ips) | (named & enis)


def _nemesis_actor(tl: Timeline, c: Change) -> dict | None:
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


def _nemesis_on(tl: Timeline, read: dict, c: Change) -> list[dict]:
    """Instant actions of the scenario before the read that took addresses the read still
    listed (why a stale list looked plausible)."""
    stale = read.get("stale") or set()
    out = []
    for e in tl.nemesis:
        if e["time"] <= read["time"] and e.get("type") in ("start", "info") and stale \
                and _mentions(e, stale, set()):
            out.append(e)
    return out[-2:]


# ---- IMDS: what the node was served ------------------------------------------------------

def _ec2_at(tl: Timeline, eni: str, t: float) -> set[str] | None:
    e = next((x for x in tl.enis if x.eni_id == eni), None)
    if e is None:
        return None
    found = None
    for s in e.ec2:
        if s.start <= t:
            found = s.ips
    return set(found) if found is not None else None


def _datastore_at(tl: Timeline, instance: str | None, eni: str, t: float) -> set[str] | None:
    found = None
    for vt, inst, enis in tl.daemon_views:
        if vt > t:
            break
        if inst == instance and enis is not None and eni in enis:
            found = enis[eni]
    return found


def _imds_read(tl: Timeline, c: Change, before: float) -> dict | None:
    """What IMDS served the node for the ENI at its last read before `before`: from the
    per-request log when the run has one, else what IMDS was serving then."""
    primary = tl.eni_primary.get(c.eni)
    macs = {m for m, e in tl.mac_eni.items() if e == c.eni}
    node = tl.node_of(c.instance) or c.instance
    got = None
    reads = _reads(tl).get(c.instance, [])
    for r in reads[:bisect.bisect_right(reads, before, key=lambda r: r["time"])][::-1]:
        if not macs or _mac_of(r["path"]) in macs:
            got = r
            break
    if got is not None:
        status = got.get("status")
        listed = {x.strip() for x in (got.get("body") or "").splitlines() if x.strip()}
        if status != 200:
            listed = None
        return _read(tl, c, got["time"], before, listed, primary, node,
                     f"IMDS's answer to {node}'s last read of {c.eni}'s local-ipv4s",
                     got.get("faults") or [], status)
    served = None
    for t, full in tl.imds_served.get(c.eni, []):
        if t > before:
            break
        served = (t, full)
    if served is None:
        return None
    # Without a per-request log the read's time is unknown: the link stands at the decision.
    return _read(tl, c, before, before, served[1], primary, node,
                 f"IMDS had served {node} for {c.eni} since {rel(tl, served[0])}",
                 [], 200)


def _mac_of(path: str) -> str:
    """.../macs/<mac>/local-ipv4s -> <mac>."""
    parts = path.rstrip("/").split("/")
    return parts[-2] if len(parts) >= 2 else ""


def _reads(tl: Timeline) -> dict[str, list[dict]]:
    """The nodes' own reads of an ENI's address list, per instance, in time order."""
    if "reads" not in tl.cache:
        out: dict[str, list[dict]] = {}
        for r in tl.imds_requests:
            path = r.get("path") or ""
            if not r.get("observer") and path.endswith("/local-ipv4s"):
                out.setdefault(r.get("instance_id"), []).append(r)
        for rs in out.values():
            rs.sort(key=lambda r: r["time"])
        tl.cache["reads"] = out
    return tl.cache["reads"]


def _read(tl, c: Change, t, before, listed, primary, node, head, faults, status) -> dict:
    if listed is None:
        text = f"{head}: {'status ' + str(status) if status != 200 else 'the MAC not served'}"
        return {"time": t, "text": text, "faults": faults, "stale": set(),
                "facts": {"node": node, "eni": c.eni, "listed": None}}
    secondary = listed - {primary}
    ec2 = _ec2_at(tl, c.eni, t) or set()  # what EC2 gave the ENI when IMDS answered
    stale, missing = secondary - ec2, ec2 - secondary
    text = f"{head}: {len(listed)} addresses"
    if missing:
        text += f", missing {shorts(missing)}"
    if stale:
        text += f", still listing {shorts(stale)} that EC2 had taken back"
    ds = _datastore_at(tl, c.instance, c.eni, before)
    lengths_equal = ds is not None and set(ds) != secondary and len(listed) == 1 + len(ds)
    if ds is not None:
        if set(ds) == secondary:
            text += f"; the datastore held the same {len(ds)}"
        elif lengths_equal:
            text += (f"; the datastore held {len(ds)}: lengths equal "
                     f"(1 + {len(ds)} = {len(listed)}), contents differ")
        else:
            text += f"; the datastore held {len(ds)}"
    facts = {"node": node, "eni": c.eni, "listed": len(listed), "stale": sorted_ips(stale),
             "missing": sorted_ips(missing), "datastore": None if ds is None else len(ds),
             "lengths_equal": lengths_equal}
    return {"time": t, "text": text, "faults": faults, "stale": stale, "facts": facts}


# ---- the daemon -------------------------------------------------------------------------

VERBS = {
    "reconcile-del": "reconcile dropped {a} from the datastore",
    "reconcile-add": "reconcile re-added {a} as free",
    "reconcile-held": "reconcile kept {a} (a pod holds it)",
    "reconcile-eni-del": "reconcile dropped ENI {eni} with its pods",
    "release": "released {a} to EC2",
    "restore-dropped": "restore dropped {a}",
}


def _decisions(tl: Timeline, node: str | None, c: Change, since: float, until: float) -> list[dict]:
    """The daemon's logged decisions about the address between the pod's start and its EC2
    call, consecutive ones of a kind merged ("reconcile dropped .16 .17 .18")."""
    evs = tl.daemon_events.get(node or "", [])
    mine = []
    for e in evs:
        if not (since <= e["time"] <= until + 0.05):
            continue
        addrs = [e["address"]] if e.get("address") else list(e.get("addresses") or [])
        if e.get("ip"):
            addrs.append(e["ip"])
        if e.get("kind") not in VERBS:
            continue  # taking an address is no step towards losing it
        if c.ip in addrs or (e.get("kind") == "reconcile-eni-del" and e.get("eni") == c.eni):
            mine.append(e)
    out: list[dict] = []
    for e in mine:
        group = [x for x in evs if x.get("kind") == e["kind"] and abs(x["time"] - e["time"]) < 0.05
                 and x.get("eni") == e.get("eni")]
        addrs = set()
        evicted: list[str] = []
        for x in group:
            addrs.update([x["address"]] if x.get("address") else x.get("addresses") or [])
            evicted += [_pod_name(k) for k in x.get("evicted") or []]
        text = VERBS.get(e["kind"], e["kind"] + " {a}").format(a=shorts(addrs), eni=e.get("eni"))
        if evicted:
            text += f", evicting {', '.join(evicted)}"
        if out and out[-1]["text"] == text:
            continue
        # A merged group stands at its first entry, whichever address it was found by.
        out.append({"time": min(x["time"] for x in group), "text": text, "kind": e["kind"],
                    "addresses": sorted_ips(addrs), "evicted": evicted})
    return out


def _pod_name(key: str) -> str:
    """aws-cni/ck-n0-p7/eth0 (a datastore key) -> ck-n0-p7."""
    parts = str(key).split("/")
    return parts[1] if len(parts) == 3 else str(key)


def _dropped_seen(tl: Timeline, c: Change, since: float, until: float) -> float | None:
    """When the daemon's view (any build's, through the monitor) stopped listing the address
    while EC2 still gave it to the node."""
    held = False
    for t, inst, enis in tl.daemon_views:
        if t < since or inst != c.instance or enis is None:
            continue
        if t > until:
            break
        now = any(c.ip in s for s in enis.values())
        if held and not now:
            return t
        held = now
    return None
