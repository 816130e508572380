"""Exposure: what of a run's fault sequence reached the build.

A build that never reads the view a fault spoils (a plugin that asks EC2 per pod and never
reads IMDS, say) cannot be caught by that fault, and cannot be shown to survive it either:
its run holds, but as "not exposed", and a certificate counts those apart (cnikit.certify).
Judged afterwards from the run's record, like the checkers: the nemesis's entries in the
history, the IMDS's request log (each request names the active faults whose target covered
it) and the gate's tally of the calls each EC2 fault's target covered.

Faults that change what the build runs on rather than what it reads (EC2 moving an address,
a daemon killed) reach every build: they count as exposure by themselves. A run with no
fault at all (pod churn only) exposes the build to that churn.
"""

from __future__ import annotations

from collections import Counter

from cnikit.check.history import NEMESIS

START, INFO = "start", "info"
# Nemesis operations that act on what the build runs on, not on a view it may never read.
ACTS = {"daemon-kill": "the build's daemon on {node} was killed",
        "component-kill": "the build's component {component} was killed",
        "ec2-assign-elsewhere": "EC2 gave {ips} to another interface",
        "ec2-unassign": "EC2 took {ips} away",
        "ec2-assign": "EC2 assigned {ips} to {eni}",
        "ec2-take-held": "EC2 moved {ips}, held by a pod, to another interface",
        "ec2-detach": "another principal detached {eni}"}


def judge(history: list[dict], imds_requests: list[dict], ec2_reached: dict[str, int],
          nodes: dict[str, str] | None = None) -> dict:
    """{"exposed": bool, "faults": [{"id", "op", "kind", "reached", "line"}], "adapted": [...]}.

    nodes: instance id -> node name, to say which node met a fault."""
    nodes = nodes or {}
    asked: dict[str, Counter] = {}
    for r in imds_requests:
        if r.get("observer"):
            continue
        for fid in r.get("faults") or ():
            asked.setdefault(fid, Counter())[nodes.get(r.get("instance_id"), r.get("instance_id"))] += 1
    faults, adapted, skipped = [], [], False
    for e in history:
        v = e.get("value") or {}
        if e.get("process") == "scenario" and e.get("f") in ("adapt", "not-exposed"):
            adapted.append(v.get("what", ""))
            skipped |= e["f"] == "not-exposed"
            continue
        if e.get("process") != NEMESIS or e.get("type") not in (START, INFO):
            continue
        op = v.get("op")
        if op == "imds-fault" and e["type"] == START:
            by = asked.get(v.get("id"), Counter())
            n = sum(by.values())
            where = ", ".join(f"{k} {c}x" for k, c in sorted(by.items(), key=str))
            line = (f"IMDS {v.get('kind')} {_target(v)}: the build asked for a faulted entry "
                    f"{n} time(s) ({where})" if n else
                    f"IMDS {v.get('kind')} {_target(v)}: the build made no request it covered")
            faults.append(_entry(v, n, line))
        elif op == "ec2-fault" and e["type"] == START:
            n = ec2_reached.get(v.get("id"), 0)
            action = (v.get("target") or {}).get("action") or "every action"
            line = (f"EC2 {v.get('kind')} on {action}: {n} of the build's calls met it" if n else
                    f"EC2 {v.get('kind')} on {action}: the build made no call it covered")
            faults.append(_entry(v, n, line))
        elif op == "ec2-sweep-enis" and e["type"] == INFO:
            swept = (v.get("target") or {}).get("enis") or []
            if swept:  # a sweep that found nothing to delete reached nothing
                faults.append(_entry(v, len(swept), "another principal swept the available "
                                                    f"{', '.join(swept)}"))
        elif op in ACTS and e["type"] in (START, INFO):
            t = v.get("target") or {}
            node = nodes.get(t.get("instance_id"), f"node {t.get('node', '?')}")
            line = ACTS[op].format(node=node, eni=t.get("eni", "an interface"),
                                   component=t.get("component", "?"),
                                   ips=", ".join(t.get("ips") or []) or "addresses")
            if v.get("after_call"):  # a crash point's kill: of the caller, for a node
                line += f" right after EC2 served its {v['after_call']}" + (
                    f" for node {v['for_node']}" if v.get("for_node") is not None else "")
            faults.append(_entry(v, 1, line))
    # Exposed: a fault reached the build; or the run had none to reach it (pod churn is its
    # subject) and did not end because the build had nothing for its fault to act on.
    exposed = any(f["reached"] for f in faults) or (not faults and not skipped)
    return {"exposed": exposed, "faults": faults, "adapted": adapted}


def _entry(v: dict, reached: int, line: str) -> dict:
    return {"id": v.get("id"), "op": v.get("op"), "kind": v.get("kind"), "reached": reached,
            "line": line}


def _target(v: dict) -> str:
    t = {k: x for k, x in (v.get("target") or {}).items() if x}
    return ("on " + ", ".join(f"{k} {x}" for k, x in t.items())) if t else "on every instance"


def label(verdict: str, exposure: dict | None) -> str:
    """A run as a certificate counts it: violation, exposed (held under its faults), not
    exposed (held, but no fault reached the build), inconclusive or error."""
    if verdict == "holds":
        return "exposed" if (exposure or {}).get("exposed", True) else "not exposed"
    return verdict


def lines(exposure: dict | None) -> list[str]:
    """What each fault reached and what the scenario did without, one line each, as every
    reader of a run shows them (its report, `cnikit run`, a certificate, a test failure)."""
    exposure = exposure or {}
    return ([f"exposure: {f['line']}" for f in exposure.get("faults") or []]
            + [f"adapted: {a}" for a in exposure.get("adapted") or []])
