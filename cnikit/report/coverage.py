"""Which faults a run combined: the nemesis's operations (cnikit.cluster.nemesis) as spans,
and every set of them in effect at once, with how long and how often.

    cov = coverage(history)      # history entries (any run's)
    cov["pairs"]                 # [{"faults": ["ec2 describe-lag", "imds stale"], "seconds", "times"}]
    cov["families"]              # {"ec2+imds": seconds, "ec2+imds+process": seconds, ...}

A fault's class is its operation and kind ("imds stale", "ec2 describe-lag", "daemon down",
"address taken"); its family is where it acts: imds, ec2 or process. An instant act (EC2
assigning an address elsewhere) counts as a combination with whatever was in effect then.
"""

from __future__ import annotations

from itertools import combinations

from cnikit.cloud.faults import KINDS as EC2_FAULTS
from fault_imds.faults import KINDS as IMDS_FAULTS

FAMILIES = ("imds", "ec2", "process")


def fault_class(op: str, value: dict) -> str | None:
    """The class of a nemesis operation (None: no fault, a heal say). A kind by its name: a
    run an older version recorded may spell it the old way (faultcore.registry)."""
    if op == "imds-fault":
        return f"imds {IMDS_FAULTS.by_name.canonical(value.get('kind'))}"
    if op == "ec2-fault":
        return f"ec2 {EC2_FAULTS.by_name.canonical(value.get('kind'))}"
    if op in ("daemon-kill", "daemon-restart"):
        return "daemon down"
    if op == "ec2-take-held":
        return "address taken"
    if op in ("ec2-assign-elsewhere", "ec2-unassign", "ec2-assign"):
        return "address moved"
    if op in ("ec2-sweep-enis", "ec2-detach"):
        return "eni taken"
    return None


def family(cls: str) -> str:
    head = cls.split()[0]
    return "process" if head == "daemon" else "imds" if head == "imds" else "ec2"


def spans(history: list[dict]) -> list[tuple[str, float, float]]:
    """(class, start, end) of every fault; an instant act has start == end."""
    nemesis = [e for e in history if e.get("process") == "nemesis"]
    last = max((e.get("time", 0.0) for e in history), default=0.0)
    ends: dict[str, float] = {}
    for e in nemesis:
        v = e.get("value") if isinstance(e.get("value"), dict) else {}
        if e.get("type") == "end" and v.get("id") is not None:
            ends.setdefault(str(v["id"]), e["time"])
    out = []
    for e in nemesis:
        v = e.get("value") if isinstance(e.get("value"), dict) else {}
        cls = fault_class(e.get("f", ""), v)
        if cls is None or e.get("type") not in ("start", "info"):
            continue
        t = e["time"]
        if e["type"] == "info":
            out.append((cls, t, t))
            continue
        end = ends.get(str(v.get("id")), last)
        if isinstance(v.get("duration"), (int, float)):
            end = min(end, t + v["duration"])
        out.append((cls, t, max(t, end)))
    return out


def coverage(history: list[dict]) -> dict:
    """Every class seen, and every pair and set of classes in effect at once."""
    sp = spans(history)
    classes: dict[str, dict] = {}
    for cls, a, b in sp:
        c = classes.setdefault(cls, {"times": 0, "seconds": 0.0})
        c["times"] += 1
        c["seconds"] += b - a
    sets: dict[frozenset, dict] = {}
    pairs: dict[frozenset, dict] = {}

    def seen(active: frozenset, seconds: float, entered: frozenset) -> None:
        if len(active) < 2:
            return
        s = sets.setdefault(active, {"times": 0, "seconds": 0.0})
        s["seconds"] += seconds
        s["times"] += bool(entered)
        for p in combinations(sorted(active), 2):
            q = pairs.setdefault(frozenset(p), {"times": 0, "seconds": 0.0})
            q["seconds"] += seconds
            q["times"] += bool(entered & set(p))

    def active_at(t: float) -> frozenset:
        return frozenset(cls for cls, a, b in sp if a <= t < b)

    # The spans' boundaries cut the run into pieces with one set in effect each.
    cuts = sorted({t for _, a, b in sp for t in (a, b) if a < b})
    before: frozenset = frozenset()
    for a, b in zip(cuts, cuts[1:], strict=False):
        now = active_at(a)
        seen(now, b - a, now - before)
        before = now
    for cls, a, b in sp:
        if a == b:  # an instant act, with whatever was in effect then
            seen(active_at(a) | {cls}, 0.0, frozenset({cls}))

    def rows(d: dict) -> list[dict]:
        return sorted(({"faults": sorted(k), "seconds": round(v["seconds"], 2),
                        "times": v["times"]} for k, v in d.items()),
                      key=lambda r: (-len(r["faults"]), -r["seconds"], r["faults"]))

    fams: dict[str, float] = {}
    for k, v in sets.items():
        fam = "+".join(f for f in FAMILIES if any(family(c) == f for c in k))
        if "+" in fam:  # faults of one family together are no compound of families
            fams[fam] = round(fams.get(fam, 0.0) + v["seconds"], 2)
    return {"classes": {k: {"times": v["times"], "seconds": round(v["seconds"], 2)}
                        for k, v in sorted(classes.items())},
            "pairs": rows(pairs), "combinations": rows(sets),
            "families": dict(sorted(fams.items()))}
