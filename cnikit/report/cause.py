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

This module joins the links; each kind of link is found and worded where its evidence is
read: cnikit.report.cause_ec2 (what EC2 did to the address, the call that did it),
cause_faults (the faults in effect, the scenario's own operations), cause_imds (what IMDS
served the node) and cause_daemon (what the daemon decided).
"""

from __future__ import annotations

from dataclasses import replace

from cnikit.check.checkers import checker_of
from cnikit.report.cause_daemon import daemon_decisions, decision_link, dropped_seen
from cnikit.report.cause_ec2 import Change, call_link, ec2_change, ec2_link, taken_before
from cnikit.report.cause_faults import (
    active_faults,
    actor_link,
    fault_link,
    nemesis_actor,
    nemesis_on,
    nemesis_text,
)
from cnikit.report.cause_imds import imds_link, imds_read
from cnikit.report.timeline import Timeline
from cnikit.report.words import rel

ARROW = " \u2192 "


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
        taken = taken_before(tl, ip, pod)
        if taken is not None:
            return _handed_out(tl, v, ip, pod, taken)
        for f in active_faults(tl, since, node_inst, None):
            links.append(fault_link(tl, f))
        links.append(_symptom(tl, v, ip, pod))
        return links

    actor = nemesis_actor(tl, change)
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
        decisions = daemon_decisions(tl, node, acting, pod.start if pod else tl.t0, until)
        dropped = dropped_seen(tl, acting, pod.start if pod else tl.t0, acted)
        first = min([d["time"] for d in decisions] + ([dropped] if dropped else []) + [acted])
    else:
        first = actor["time"]
    read = imds_read(tl, acting, first) if actor is None else None

    # 1. the faults: active where the daemon read IMDS (or acted), and the scenario's own
    # EC2 actions on what that read still listed.
    if actor is not None:
        links.append(actor_link(actor, acted))
    else:
        at = read["time"] if read else first
        for f in active_faults(tl, at, acting.instance, acting.eni, read):
            links.append(fault_link(tl, f))
        if read is not None:
            for e in nemesis_on(tl, read, acting):
                links.append({"step": "fault", "time": e["time"],
                              "text": f"fault: the scenario's {nemesis_text(e)}, "
                                      "while IMDS still listed them",
                              "facts": {"by": "scenario", "op": e.get("f")}})
    # 2. what IMDS served the node
    if read is not None:
        links.append(imds_link(read))
    # 3. the daemon's action
    who = f"the daemon on {node or acting.instance or 'its node'}"
    if actor is None:
        for d in decisions:
            if d["kind"] == "release" and change.call is not None:
                continue  # the EC2 call below says it
            links.append(decision_link(who, node or acting.instance, d))
        if not decisions and dropped is not None:
            links.append({"step": "daemon", "time": dropped,
                          "text": f"{who} dropped {change.ip} from its datastore "
                                  "(seen in its view)",
                          "facts": {"node": node or acting.instance, "kind": "dropped",
                                    "addresses": [change.ip]}})
    if change.call is not None:
        links.append(call_link(who if actor is None else "the scenario", change.call,
                                None if actor is not None else node or acting.instance))
    # 4. EC2's reaction
    links.append(ec2_link(tl, change))
    # 5. the symptom
    links.append(_symptom(tl, v, ip, pod))
    links.sort(key=lambda x: (x["time"] if x["time"] is not None else tl.t1))
    return links


def _handed_out(tl: Timeline, v: dict, ip: str, pod, taken: Change) -> list[dict]:
    """The chain of a pod given an address EC2 had already taken from its node: who took
    it, what IMDS served the node before the ADD, the ADD itself, the symptom."""
    links: list[dict] = []
    actor = nemesis_actor(tl, taken)
    node = tl.node_of(pod.instance_id) or pod.instance_id
    who = f"the daemon on {node}"
    if actor is not None:
        links.append(actor_link(actor, taken.call["time"]))
    elif taken.call is not None:
        caller = tl.eni_instance.get(taken.call.get("eni_id"))
        by = who if caller == pod.instance_id else \
            f"the daemon on {tl.node_of(caller) or 'another node'}"
        links.append(call_link(by, taken.call, tl.node_of(caller) or caller))
    links.append(ec2_link(tl, taken))
    read = imds_read(tl, taken, pod.start)
    for f in active_faults(tl, read["time"] if read else pod.start, pod.instance_id, taken.eni, read):
        links.append(fault_link(tl, f))
    if read is not None:
        links.append(imds_link(read))
    for d in daemon_decisions(tl, tl.node_of(pod.instance_id), taken, taken.time, pod.start):
        links.append(decision_link(who, node, d))
    links.append({"step": "daemon", "time": pod.start,
                  "text": f"{who} gave {ip} to pod {pod.name} (its CNI ADD), an address EC2 "
                          "no longer gave the node",
                  "facts": {"node": node, "kind": "cni-add", "addresses": [ip],
                            "pod": pod.name}})
    links.append(_symptom(tl, v, ip, pod))
    links.sort(key=lambda x: (x["time"] if x["time"] is not None else tl.t1))
    return links


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
