"""What IMDS served a node, for the root-cause chain (cnikit.report.cause): its last read of an
ENI's address list before it acted (from the per-request log when the run has one), set
against what EC2 gave the ENI and what the daemon's datastore held then.
"""

from __future__ import annotations

import bisect

from cnikit.report.cause_ec2 import Change
from cnikit.report.timeline import Timeline, sorted_ips
from cnikit.report.words import rel, shorts


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


def imds_read(tl: Timeline, c: Change, before: float) -> dict | None:
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
    if _logged_since(tl) <= before:
        # The log covers the decision and holds no read of this ENI's list by the node: the
        # build never read it (it may never read IMDS at all), so no IMDS answer led to it.
        return None
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


def _logged_since(tl: Timeline) -> float:
    """When the run's per-request log begins (infinity: the run has none, or the report
    predates it); a ring, so a long run's log may begin after the run did."""
    if "logged_since" not in tl.cache:
        tl.cache["logged_since"] = min((r["time"] for r in tl.imds_requests
                                        if isinstance(r.get("time"), (int, float))),
                                       default=float("inf"))
    return tl.cache["logged_since"]


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


def imds_link(read: dict) -> dict:
    return {"step": "imds", "time": read["time"], "text": read["text"], "facts": read["facts"]}
