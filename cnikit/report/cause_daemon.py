"""What the daemon did about an address, for the root-cause chain (cnikit.report.cause): its
logged decisions (when the build keeps a log of them), or when its view stopped listing the
address.
"""

from __future__ import annotations

from cnikit.report.cause_ec2 import Change
from cnikit.report.timeline import Timeline, sorted_ips
from cnikit.report.words import shorts

VERBS = {
    "reconcile-del": "reconcile dropped {a} from the datastore",
    "reconcile-add": "reconcile re-added {a} as free",
    "reconcile-held": "reconcile kept {a} (a pod holds it)",
    "reconcile-eni-del": "reconcile dropped ENI {eni} with its pods",
    "release": "released {a} to EC2",
    "restore-dropped": "restore dropped {a}",
}


def daemon_decisions(tl: Timeline, node: str | None, c: Change, since: float, until: float) -> list[dict]:
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


def dropped_seen(tl: Timeline, c: Change, since: float, until: float) -> float | None:
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


def decision_link(who: str, node: str | None, d: dict) -> dict:
    return {"step": "daemon", "time": d["time"], "text": f"{who}: {d['text']}",
            "facts": {"node": node, "kind": d["kind"], "addresses": d["addresses"],
                      "evicted": d["evicted"]}}
