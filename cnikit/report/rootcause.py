"""The root cause in plain words, one short sentence per cause, from the facts the chains'
links carry (cnikit.report.cause): who acted, on what evidence, and what it cost which pods.
The chains themselves, shown below it, carry every address, time and call.

    groups = chain_groups(violations)   # violations whose chains share every cause
    causes = root_causes(tl, violations)
    # [{"chains": ["A"], "violations": [1, 2], "text": "the daemon on node-0 took ..."}]

Only what the record shows is said: a chain without an action of the build (no daemon
decision, no EC2 call of its own) says so instead of naming one. A run without violations
has no root cause.
"""

from __future__ import annotations

from cnikit.check.checkers import checker_of, in_order
from cnikit.report.cause_ec2 import RELEASES
from cnikit.report.timeline import Timeline
from cnikit.report.words import rel, shorts

# Daemon decisions that take an address out of the datastore.
DROPS = ("reconcile-del", "reconcile-eni-del", "restore-dropped", "dropped")


def chain_groups(violations: list[dict]) -> list[dict]:
    """Violations whose chains share every cause (faults, IMDS, daemon, EC2 call) as one
    group: {"name": "A", "links": [...], "violations": [numbers], "ends": [(n, [links])]}."""
    groups: dict[tuple, dict] = {}
    for n, v in enumerate(violations, 1):
        links = v.get("chain") or []
        common = [x for x in links if x["step"] not in ("ec2", "symptom")]
        if not common:
            continue
        key = tuple((x["step"], x["text"], x["time"]) for x in common)
        g = groups.setdefault(key, {"links": common, "violations": [], "ends": []})
        g["violations"].append(n)
        g["ends"].append((n, [x for x in links if x["step"] in ("ec2", "symptom")]))
    out = list(groups.values())
    for k, g in enumerate(out):
        g["name"] = chr(ord("A") + k) if k < 26 else str(k + 1)
    return out


def root_causes(tl: Timeline, violations: list[dict]) -> list[dict]:
    """One entry per distinct root cause, in the order of the first violation it explains."""
    out: dict[str, dict] = {}
    for g in chain_groups(violations):
        text = sentence(tl, g)
        entry = out.setdefault(text, {"chains": [], "violations": [], "text": text})
        entry["chains"].append(g["name"])
        entry["violations"] += g["violations"]
    if violations and not out:
        first = min(violations, key=lambda v: v.get("since") or 0)
        text = (f"not shown by the record: no fault, EC2 change, IMDS answer or decision of "
                f"the build leads to the violations, the first of which was {first.get('kind')} "
                f"on {first.get('subject')} at {rel(tl, first.get('since'))}")
        out[text] = {"chains": [], "violations": list(range(1, len(violations) + 1)),
                     "text": text}
    return list(out.values())


def _facts(x: dict) -> dict:
    return x.get("facts") or {}


def _names(pods: list[str]) -> str:
    """A few pods by name, more by their number (the chains below name each)."""
    if len(pods) > 2:
        return f"{len(pods)} pods"
    return ("pod " if len(pods) == 1 else "pods ") + ", ".join(pods)


def _few(addresses: list[str]) -> str:
    """One or two addresses by name, more by their number."""
    if len(addresses) > 2:
        return f"{len(addresses)} addresses"
    return shorts(addresses)


def outcome(symptoms: list[dict]) -> str:
    """What the violations were, by kind: "pods p7, p8 went dark and ..."."""
    named: dict[str, list[str]] = {}  # kind -> its pods, for checkers that name them together
    parts = []
    for x in symptoms:
        f = _facts(x)
        kind, pods = f.get("kind") or "", f.get("pods") or []
        checker = checker_of(kind)
        if checker.outcome_predicate:
            group = named.setdefault(kind, [])
            group += [p for p in pods if p not in group]
        else:
            parts.append(checker.outcome(f.get("ip"), pods, x["text"]))
    head, said = [], set()
    for kind, checker in in_order():
        pods = [p for p in named.get(kind, []) if p not in said]
        if pods:
            head.append(f"{_names(pods)} {checker.outcome_predicate}")
            said |= set(pods)
    return _and(head + list(dict.fromkeys(parts)))


def _effects(links: list[dict], node: str | None) -> list[str]:
    """The build's own steps on `node`, in order, in short: what its daemon did and which EC2
    calls it made (each step's addresses, times and calls are the chain's)."""
    out = []
    calls = [x for x in links if x["step"] == "ec2-call" and _facts(x).get("by") == "daemon"
             and _facts(x).get("node") == node]
    for x in links:
        f = _facts(x)
        addresses = f.get("addresses") or []
        a = _few(addresses)
        if x["step"] == "daemon":
            kind = f.get("kind")
            if kind in DROPS:
                evicted = f.get("evicted") or []
                out.append(f"dropped {a} " + (f"in use by {_names(evicted)}" if evicted
                                              else "from its datastore"))
            elif kind == "release" and not calls:
                out.append(f"released {a} to EC2")
            elif kind == "cni-add":
                out.append(f"gave {a} to pod {f.get('pod')} though EC2 no longer gave the node "
                           "that address")
        elif x in calls:
            released = f.get("action", "") in RELEASES
            out.append(f"released {a} to EC2" if released else f"had EC2 move {a}")
    return list(dict.fromkeys(out))


def _and(parts: list[str]) -> str:
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def sentence(tl: Timeline, g: dict) -> str:
    """The group's root cause in one sentence (no period: the page ends it): the cause, what
    the build then did, and what it cost; the chain in the report has every step's detail."""
    links = g["links"]
    symptoms = [x for _, ends in g["ends"] for x in ends if x["step"] == "symptom"]
    result = outcome(symptoms)
    actor = next((x for x in links if _facts(x).get("acted")), None)
    imds = next((x for x in reversed(links) if x["step"] == "imds"
                 and (_facts(x).get("stale") or _facts(x).get("missing"))), None)
    node = next((_facts(x).get("node") for x in links
                 if x["step"] in ("daemon", "ec2-call", "imds") and _facts(x).get("node")), None)
    effects = _and(_effects(links, node))
    daemon = f"the daemon on {node}" if node else "the daemon"
    if actor is not None:
        change = actor["text"].removeprefix("fault: ").split(" (")[0]
        then = (f", and {daemon} then {effects}" if effects
                else " before any step of the build's")
        return f"the scenario itself made the EC2 change ({change}){then}: {result}"
    if imds is not None and effects:
        f = _facts(imds)
        if f.get("lengths_equal"):
            who = "reconcile" if any(_facts(x).get("kind", "").startswith("reconcile")
                                     for x in links) else "daemon"
            cause = (f"the {who} on {node or 'the node'} compared only lengths, and a stale "
                     f"IMDS list matched its datastore's (1 + {f['datastore']} = "
                     f"{f['listed']} addresses)")
        else:
            cause = f"{daemon} took a stale IMDS list for {f.get('eni')} as current"
        return f"{cause}, so it {effects}: {result}"
    if effects:
        # An EC2 change the build did not make, before its first step, is why it stepped.
        first = min((x["time"] for x in links if x["step"] == "daemon"), default=None)
        before = [x for _, ends in g["ends"] for x in ends if x["step"] == "ec2"
                  and first is not None and x["time"] < first]
        after = ""
        if before:
            f = _facts(before[0])
            after = f"after EC2 took {f.get('ip')} from {f.get('from_eni')}, "
        return f"{after}{daemon} {effects}: {result}"
    faults = [x for x in links if x["step"] == "fault"]
    return ("not shown by the record: no EC2 change, IMDS answer or decision of the build "
            "leads to it" + (f" ({len(faults)} fault(s) in effect)" if faults else "")
            + f": {result}")
