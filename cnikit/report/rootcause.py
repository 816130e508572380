"""The root cause in plain words, one sentence per cause, from the facts the chains' links
carry (cnikit.report.cause): who acted, on what evidence, and what it cost which pods.

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
                f"the build leads to the violations; the first was {first.get('kind')} on "
                f"{first.get('subject')} at {rel(tl, first.get('since'))}")
        out[text] = {"chains": [], "violations": list(range(1, len(violations) + 1)),
                     "text": text}
    return list(out.values())


def _facts(x: dict) -> dict:
    return x.get("facts") or {}


def _names(pods: list[str]) -> str:
    return ("pod " if len(pods) == 1 else "pods ") + ", ".join(pods)


def outcome(symptoms: list[dict]) -> str:
    """What the violations were, by kind: "pods p7, p8 went dark; ..."."""
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
    return "; ".join(head + list(dict.fromkeys(parts)))


def _effects(links: list[dict], node: str | None) -> list[str]:
    """The build's own steps on `node`, in order: what its daemon did and which EC2 calls it
    made."""
    out = []
    calls = [x for x in links if x["step"] == "ec2-call" and _facts(x).get("by") == "daemon"
             and _facts(x).get("node") == node]
    for x in links:
        f = _facts(x)
        a = shorts(f.get("addresses") or [])
        if x["step"] == "daemon":
            kind = f.get("kind")
            if kind in DROPS:
                evicted = f.get("evicted") or []
                it = "them" if len(f.get("addresses") or []) > 1 else "it"
                out.append(f"dropped {a} from its datastore"
                           + (f" while {_names(evicted)} still used {it}" if evicted else ""))
            elif kind == "reconcile-add":
                out.append(f"re-added {a} as free")
            elif kind == "release" and not calls:
                out.append(f"released {a} to EC2")
            elif kind == "cni-add":
                out.append(f"gave {a} to pod {f.get('pod')} (its CNI ADD) though EC2 no longer "
                           "gave the node that address")
        elif x in calls:
            action = f.get("action", "")
            verb = "released" if action in RELEASES else "had EC2 move"
            out.append(f"{verb} {a}{' to EC2' if action in RELEASES else ''} "
                       f"({action} at {x.get('at') or ''})")
    return list(dict.fromkeys(out))


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def sentence(tl: Timeline, g: dict) -> str:
    links = g["links"]
    symptoms = [x for _, ends in g["ends"] for x in ends if x["step"] == "symptom"]
    result = outcome(symptoms)
    actor = next((x for x in links if _facts(x).get("acted")), None)
    imds = next((x for x in reversed(links) if x["step"] == "imds"
                 and (_facts(x).get("stale") or _facts(x).get("missing"))), None)
    node = next((_facts(x).get("node") for x in links
                 if x["step"] in ("daemon", "ec2-call", "imds") and _facts(x).get("node")), None)
    effects = _effects(links, node)
    daemon = f"the daemon on {node}" if node else "the daemon"
    if actor is not None:
        text = f"the scenario itself made the EC2 change ({actor['text'].removeprefix('fault: ')})"
        text += (f"; {daemon} then {_and(effects)}" if effects
                 else "; no step of the build's is on record before it")
        return f"{text}. Result: {result}"
    if imds is not None and effects:
        f = _facts(imds)
        seen = ([f"still listing {shorts(f['stale'])} that EC2 had taken back"] if f.get("stale")
                else []) + ([f"lacking {shorts(f['missing'])} that EC2 still gave it"]
                            if f.get("missing") else [])
        text = (f"{daemon} took a stale IMDS address list for {f.get('eni')} "
                f"({' and '.join(seen)}) as current")
        if f.get("lengths_equal"):
            who = "the reconcile" if any(_facts(x).get("kind", "").startswith("reconcile")
                                         for x in links) else "it"
            text += (f", because the list was as long as its datastore (1 + {f['datastore']} = "
                     f"{f['listed']} addresses) though the addresses differed: {who} compared "
                     "only lengths")
        return f"{text}. It then {_and(effects)}. Result: {result}"
    if effects:
        # An EC2 change the build did not make, before its first step, is why it stepped.
        first = min((x["time"] for x in links if x["step"] == "daemon"), default=None)
        before = [x for _, ends in g["ends"] for x in ends if x["step"] == "ec2"
                  and first is not None and x["time"] < first]
        after = ""
        if before:
            f = _facts(before[0])
            after = (f"after EC2 took {f.get('ip')} from {f.get('from_eni')} "
                     f"({before[0].get('at') or ''}), ")
        return f"{after}{daemon} {_and(effects)}. Result: {result}"
    faults = [x["text"].removeprefix("fault: ") for x in links if x["step"] == "fault"]
    return ("not shown by the record: no EC2 change, IMDS answer or decision of the build "
            "leads to it" + (f"; in effect then: {'; '.join(faults)}" if faults else "")
            + f". Result: {result}")
