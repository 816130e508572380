"""From a run's record (history, IMDS events, gate audit) to the timelines a report draws.

Per ENI, three views of its secondary IPs and prefixes over time (the ENI's own primary IP
left out: the daemon never holds it; an address that is another ENI's primary stays in): EC2 (the monitor's `ownership` diffs), IMDS as served (`served`
events of the fault IMDS) and the daemon's datastore (the monitor's `daemon-view`). The EC2
and IMDS views are IPv4's; who held each address (`ip_owners`) covers IPv6 too. Plus
fault spans, EC2 calls, and one lane per pod.

A view is a list of Segment(start, end, ips) with ips None when the view is absent (the MAC
not served, the daemon down). Times are epoch seconds, like every record they come from.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from fault_imds.faults import KINDS as IMDS_FAULTS

ABSENT = None  # a view that is not there: the MAC not served, the daemon not answering
GONE = "gone"  # the ENI does not exist (yet, or any more): nothing is drawn


def ip_key(s: str):
    try:
        n = ipaddress.ip_network(s, strict=False)
        return (0, int(n.network_address), n.prefixlen)
    except ValueError:
        return (1, 0, 0, s)


def sorted_ips(ips) -> list[str]:
    return sorted(ips, key=ip_key)


@dataclass
class Segment:
    start: float
    end: float
    ips: frozenset[str] | None


@dataclass
class EniTimeline:
    eni_id: str
    instance_id: str | None = None
    device_index: int | None = None
    ec2: list[Segment] = field(default_factory=list)
    imds: list[Segment] = field(default_factory=list)
    daemon: list[Segment] = field(default_factory=list)
    node: str | None = None  # the node's name, when the run recorded its nodes
    primary_ip: str | None = None


@dataclass
class Span:
    start: float
    end: float
    label: str
    source: str  # "imds", "nemesis", "ec2"
    detail: dict = field(default_factory=dict)
    instant: bool = False


@dataclass
class PodTimeline:
    name: str
    ip: str
    instance_id: str | None
    node: object
    start: float
    end: float
    deleted: bool = False


@dataclass
class Timeline:
    t0: float
    t1: float
    enis: list[EniTimeline]
    faults: list[Span]
    calls: list[dict]
    pods: list[PodTimeline]
    steps: list[Span]
    instances: list[str]
    primaries: set[str]
    # ip -> [(time, eni_id or None, instance_id or None, primary)]: every EC2 ownership change
    ip_owners: dict[str, list[tuple[float, str | None, str | None, bool]]]
    eni_primary: dict[str, str] = field(default_factory=dict)
    eni_instance: dict[str, str] = field(default_factory=dict)
    mac_eni: dict[str, str] = field(default_factory=dict)
    node_name: dict[str, str] = field(default_factory=dict)  # instance id -> node name
    # eni -> [(time, every address IMDS served for it, primary included; None: not served)]
    imds_served: dict[str, list] = field(default_factory=dict)
    # (time, instance, {eni: addresses} or None when the daemon did not answer)
    daemon_views: list = field(default_factory=list)
    imds_requests: list[dict] = field(default_factory=list)
    daemon_events: dict[str, list[dict]] = field(default_factory=dict)  # epoch "time" added
    nemesis: list[dict] = field(default_factory=list)
    cache: dict = field(default_factory=dict, repr=False)  # what readers derive once

    def node_of(self, instance_id: str | None) -> str | None:
        return self.node_name.get(instance_id) if instance_id else None


class _Steps:
    """Change points of one view; turned into segments once the end is known."""

    def __init__(self) -> None:
        self.points: list[tuple[float, frozenset[str] | None]] = []

    def set(self, t: float, ips) -> None:
        ips = ips if ips is None or ips is GONE else frozenset(ips)
        if self.points and self.points[-1][1] == ips:
            return
        if self.points and self.points[-1][0] == t:
            self.points[-1] = (t, ips)
        else:
            self.points.append((t, ips))

    def segments(self, t0: float, t1: float) -> list[Segment]:
        out: list[Segment] = []
        for i, (t, ips) in enumerate(self.points):
            end = self.points[i + 1][0] if i + 1 < len(self.points) else t1
            start = max(t, t0)
            if end <= t0 or start >= t1 or ips is GONE:
                continue
            out.append(Segment(start, min(end, t1), ips))
        return out


def _time_range(history: list[dict], imds_events: list[dict], violations: list[dict]) -> tuple[float, float]:
    times = [e["time"] for e in history if isinstance(e.get("time"), (int, float))]
    if not times:
        times = [e["time"] for e in imds_events if isinstance(e.get("time"), (int, float))]
    for v in violations:
        for k in ("since", "until"):
            if isinstance(v.get(k), (int, float)):
                times.append(v[k])
    if not times:
        return 0.0, 1.0
    t0, t1 = min(times), max(times)
    # A little room after the last record, so what began at the end still shows.
    return t0, t1 + max((t1 - t0) * 0.03, 0.05)


@dataclass
class _Ids:
    """What the lanes learn of ENIs and instances as they are built, in order (EC2, IMDS,
    the daemon), each lane reading what the ones before it learnt."""

    eni_primary: dict[str, str] = field(default_factory=dict)
    eni_instance: dict[str, str] = field(default_factory=dict)
    instances: list[str] = field(default_factory=list)  # in the order EC2 first showed them
    mac_eni: dict[str, str] = field(default_factory=dict)


def build(history: list[dict], imds_events: list[dict] | None = None,
          audit: list[dict] | None = None, violations: list[dict] | None = None,
          nodes: list[dict] | None = None, imds_requests: list[dict] | None = None,
          daemon_events: dict | None = None) -> Timeline:
    """nodes (optional, a RunResult's): [{"instance_id", "name", "enis": [{"eni_id", "mac",
    "device_index", "primary_ip"}]}]; imds_requests: the fault IMDS's per-request log;
    daemon_events: {node name: [{"t" (monotonic), "kind", ...}]} (the reference daemon's)."""
    imds_events = imds_events or []
    nodes = nodes or []
    t0, t1 = _time_range(history, imds_events, violations or [])
    ids = _Ids()
    ec2_steps, ip_owners = _ec2_lane(history, nodes, ids)
    imds_steps, imds_served = _imds_lane(imds_events, nodes, ids)
    daemon_steps, daemon_views = _daemon_lane(history, ids)
    node_name = {n.get("instance_id"): n.get("name") for n in nodes if n.get("name")}
    enis = _eni_timelines(nodes, ids, node_name, ec2_steps, imds_steps, daemon_steps, t0, t1)
    return Timeline(t0, t1, enis, _faults(history, imds_events, ids.instances, ids.mac_eni,
                                          ids.eni_instance, t0, t1),
                    _calls(audit or [], ids.instances, ids.eni_instance, t0, t1),
                    _pods(history, t1), _steps(history), ids.instances,
                    set(ids.eni_primary.values()), ip_owners,
                    eni_primary=ids.eni_primary, eni_instance=ids.eni_instance,
                    mac_eni=ids.mac_eni, node_name=node_name, imds_served=imds_served,
                    daemon_views=daemon_views,
                    imds_requests=[r for r in imds_requests or [] if isinstance(r, dict)
                                   and isinstance(r.get("time"), (int, float))],
                    daemon_events=_daemon_events(daemon_events, history),
                    nemesis=[e for e in history if e.get("process") == "nemesis"])


def _ec2_lane(history: list[dict], nodes: list[dict],
              ids: _Ids) -> tuple[dict[str, _Steps], dict[str, list]]:
    """EC2's view per ENI, replayed from the ownership diffs, and who held each address."""
    ec2_steps: dict[str, _Steps] = {}
    ip_owners: dict[str, list] = {}
    for t, ips, prefixes, before in _ownership(history):
        per_eni: dict[str, object] = {eni: GONE for eni in ec2_steps}  # ENIs no longer there
        for ip, (inst, eni, primary) in ips.items():
            ids.eni_instance[eni] = inst
            if inst not in ids.instances:
                ids.instances.append(inst)
            if _is_ipv6(ip):
                continue  # the lanes compare EC2 with IMDS's IPv4 lists (below)
            if not isinstance(per_eni.get(eni), set):
                per_eni[eni] = set()
            if primary:
                ids.eni_primary[eni] = ip
            else:
                per_eni[eni].add(ip)
        for cidr, (inst, eni) in prefixes.items():
            ids.eni_instance[eni] = inst
            if _is_ipv6(cidr):
                continue
            if not isinstance(per_eni.get(eni), set):
                per_eni[eni] = set()
            per_eni[eni].add(cidr)
        for eni, s in per_eni.items():
            ec2_steps.setdefault(eni, _Steps()).set(t, s)
        for ip in set(before) | set(ips):
            old, new = before.get(ip), ips.get(ip)
            if old != new:
                inst, eni, primary = new if new else (None, None, False)
                ip_owners.setdefault(ip, []).append((t, eni, inst, bool(primary)))
    for n in nodes:
        for e in n.get("enis") or []:
            if e.get("eni_id") and e.get("primary_ip"):
                ids.eni_primary.setdefault(e["eni_id"], e["primary_ip"])
    return ec2_steps, ip_owners


def _imds_lane(imds_events: list[dict], nodes: list[dict],
               ids: _Ids) -> tuple[dict[str, _Steps], dict[str, list]]:
    """IMDS's view per ENI as it was served, and every address it served for each."""
    imds_steps: dict[str, _Steps] = {}
    served: dict[str, dict] = {}
    ids.mac_eni.update({e.get("mac"): e.get("eni_id") for n in nodes
                        for e in n.get("enis") or [] if e.get("mac")})
    imds_served: dict[str, list] = {}
    # The IPv4 view: IPv6 lists would add steps that change nothing and move "served since".
    for ev in sorted((e for e in imds_events if e.get("type") == "served"
                      and e.get("entry", "local-ipv4s") in ("local-ipv4s", "ipv4-prefix")),
                     key=lambda e: e.get("seq", 0)):
        inst = ev.get("instance_id")
        if ids.instances and inst not in ids.instances:
            continue
        eni = ev.get("eni_id") or ids.mac_eni.get(ev.get("mac", "")) or f"mac {ev.get('mac')}"
        if ev.get("eni_id"):
            ids.mac_eni[ev.get("mac", "")] = ev["eni_id"]
        ids.eni_instance.setdefault(eni, inst)
        st = served.setdefault(eni, {"local-ipv4s": set(), "ipv4-prefix": set(), "present": True})
        st[ev.get("entry", "local-ipv4s")] = set(ev.get("values") or ())
        st["present"] = bool(ev.get("present", True))
        full = st["local-ipv4s"] | st["ipv4-prefix"] if st["present"] else None
        imds_served.setdefault(eni, []).append((ev["time"], full))
        # Only this ENI's own primary IP is left out: an address that is another ENI's
        # primary (now or later) is still a secondary IP here.
        value = None if full is None else full - {ids.eni_primary.get(eni)}
        imds_steps.setdefault(eni, _Steps()).set(ev["time"], value)
    return imds_steps, imds_served


def _daemon_lane(history: list[dict], ids: _Ids) -> tuple[dict[str, _Steps], list]:
    """The daemon's datastore per ENI (the monitor's daemon views), each address put on the
    ENI EC2 showed it on at the view's time, and every view as it was."""
    daemon_steps: dict[str, _Steps] = {}
    daemon_views: list[tuple[float, str, dict[str, set[str]] | None]] = []
    eni_instance, eni_primary = ids.eni_instance, ids.eni_primary
    last_eni: dict[str, str] = {}  # address -> the last ENI that held it as a secondary
    current: dict[str, str] = {}  # address -> the ENI holding it as a secondary now
    alive: set[str] = set()  # ENIs that exist in EC2 now
    replay = iter(_ownership(history))
    pending = next(replay, None)
    for e in history:
        if e.get("process") != "monitor" or e.get("f") not in ("daemon-view", "daemon-view-error"):
            continue
        v, t, f = e.get("value") or {}, e["time"], e.get("f")
        # EC2 as it was at this view (ownership entries up to and including its time).
        while pending is not None and pending[0] <= t:
            _, ips, prefixes, _ = pending
            current = {ip: o[1] for ip, o in ips.items() if not o[2]}
            current.update({c: o[1] for c, o in prefixes.items()})
            alive = {o[1] for o in ips.values()} | {o[1] for o in prefixes.values()}
            last_eni.update(current)
            pending = next(replay, None)
        inst = v.get("instance_id")
        mine = {eni for eni in alive if eni_instance.get(eni) == inst}
        if f == "daemon-view-error":
            for eni in mine:
                daemon_steps.setdefault(eni, _Steps()).set(t, ABSENT)
            daemon_views.append((t, inst, None))
            continue
        per_eni: dict[str, set[str]] = {eni: set() for eni in mine}
        if isinstance(v.get("enis"), dict):
            for eni, held in v["enis"].items():
                per_eni.setdefault(eni, set()).update(held)
                eni_instance.setdefault(eni, inst)
        else:
            for ip in v.get("ips", []):
                eni = current.get(ip)
                if eni is None or eni_instance.get(eni) != inst:
                    eni = last_eni.get(ip)
                if eni is None or eni_instance.get(eni) != inst:
                    eni = f"unattributed on {inst}"
                    eni_instance.setdefault(eni, inst)
                per_eni.setdefault(eni, set()).add(ip)
        daemon_views.append((t, inst, per_eni))
        for eni in [x for x, i in eni_instance.items() if i == inst and x in daemon_steps]:
            per_eni.setdefault(eni, GONE)  # gone from EC2 and from the daemon's view
        for eni, s in per_eni.items():
            if s is not GONE:
                s = s - {eni_primary.get(eni)}
            daemon_steps.setdefault(eni, _Steps()).set(t, s)
    return daemon_steps, daemon_views


def _eni_timelines(nodes: list[dict], ids: _Ids, node_name: dict[str, str],
                   ec2_steps: dict[str, _Steps], imds_steps: dict[str, _Steps],
                   daemon_steps: dict[str, _Steps], t0: float, t1: float) -> list[EniTimeline]:
    """The three views of every ENI any of them showed, ordered by instance, then device
    index (addresses no ENI could be found for last)."""
    device = {e.get("eni_id"): e.get("device_index") for n in nodes
              for e in n.get("enis") or []}
    order = {inst: n for n, inst in enumerate(ids.instances)}
    enis = []
    for eni in dict.fromkeys([*ec2_steps, *imds_steps, *daemon_steps]):
        inst = ids.eni_instance.get(eni)
        enis.append(EniTimeline(
            eni, inst, device.get(eni),
            ec2_steps[eni].segments(t0, t1) if eni in ec2_steps else [],
            imds_steps[eni].segments(t0, t1) if eni in imds_steps else [],
            daemon_steps[eni].segments(t0, t1) if eni in daemon_steps else [],
            node_name.get(inst), ids.eni_primary.get(eni)))
    enis.sort(key=lambda x: (order.get(x.instance_id, len(order)), x.eni_id.startswith("unattr"),
                             x.device_index if x.device_index is not None else 99))
    return enis


def _is_ipv6(ip: str) -> bool:
    return ":" in ip


def _ownership(history):
    """Each ownership entry replayed: (time, ips, prefixes, ips before it), where ips maps
    address -> (instance, eni, primary) and prefixes cidr -> (instance, eni)."""
    ips: dict[str, tuple] = {}
    prefixes: dict[str, tuple] = {}
    for e in history:
        if e.get("process") != "monitor" or e.get("f") != "ownership":
            continue
        v = e.get("value") or {}
        before = ips
        ips = {} if v.get("full") else dict(ips)
        if v.get("full"):
            prefixes = {}
        else:
            prefixes = dict(prefixes)
        ips.update({ip: tuple(o[:3]) for ip, o in (v.get("set") or {}).items()})
        for ip in v.get("unset") or []:
            ips.pop(ip, None)
        prefixes.update({c: tuple(o[:2]) for c, o in (v.get("prefixes_set") or {}).items()})
        for cidr in v.get("prefixes_unset") or []:
            prefixes.pop(cidr, None)
        yield e["time"], ips, prefixes, before


def _daemon_events(events: dict | None, history: list[dict]) -> dict[str, list[dict]]:
    """A daemon's decisions with epoch times. The reference daemon stamps them with the
    system's monotonic clock, the one the history's "mono" is read from."""
    if not isinstance(events, dict):
        return {}
    offsets = sorted(e["time"] - e["mono"] for e in history
                     if isinstance(e.get("mono"), (int, float)) and isinstance(e.get("time"), (int, float)))
    offset = offsets[len(offsets) // 2] if offsets else 0.0
    out: dict[str, list[dict]] = {}
    for node, evs in events.items():
        for ev in evs if isinstance(evs, list) else []:
            t = ev.get("t") if isinstance(ev, dict) else None
            if not isinstance(t, (int, float)):
                continue
            # Epoch stamps (a build that logs wall-clock time) are taken as they are.
            out.setdefault(str(node), []).append({**ev, "time": t if t > 1e9 else t + offset})
    return out


def _steps(history) -> list[Span]:
    """A scenario's own narration: process "scenario", f "step", value {"title", ...}."""
    out = []
    for e in history:
        if e.get("process") == "scenario" and e.get("f") == "step":
            v = e.get("value") or {}
            title = v.get("title") if isinstance(v, dict) else str(v)
            out.append(Span(e["time"], e["time"], str(title), "scenario",
                            v if isinstance(v, dict) else {}, instant=True))
    return out


def short_ip(ip: str) -> str:
    """10.0.1.7 -> .7 and 10.0.1.16/28 -> .16/28; an IPv6 address or prefix -> its last 64
    bits (2600:1f14:5:6:1234::5 -> ::1234:0:0:5, its /80 -> ::1234:0:0:0/80): enough to
    tell apart the addresses of one subnet (an IPv6 subnet is a /64)."""
    head, _, mask = ip.partition("/")
    tail = f"/{mask}" if mask else ""
    if _is_ipv6(head):
        try:
            low = int(ipaddress.IPv6Address(head)) & ((1 << 64) - 1)
        except ValueError:
            return ip
        return str(ipaddress.IPv6Address(low)) + tail
    return "." + head.rsplit(".", 1)[-1] + tail


def fmt(v) -> str:
    """A value as a person reads it: lists of addresses as .7 .9, no Python reprs."""
    if v is None:
        return "\u2014"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple, set, frozenset)):
        items = list(v)
        if items and all(isinstance(i, str) and ip_key(i)[0] == 0 for i in items):
            return " ".join(short_ip(i) for i in sorted_ips(items))
        return ", ".join(fmt(i) for i in items) or "\u2014"
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items()) or "\u2014"
    return str(v)


def nemesis_fields(value: dict) -> dict:
    """A nemesis entry's value as a person reads it: what it hit, then its parameters."""
    target = value.get("target") if isinstance(value.get("target"), dict) else {}
    fields = {k: x for k, x in target.items() if x not in (None, [], {}, "")}
    fields.update((k, x) for k, x in value.items()
                  if k not in ("op", "id", "target", "duration", "by") and k not in fields
                  and x not in (None, [], {}, ""))
    return fields


# The fields every fault's JSON has (faultcore.fault.Fault.to_json); the rest are its kind's.
COMMON_FIELDS = ("id", "kind", "target", "duration", "created", "expires", "probability")


def _label_attributes(fault: dict) -> list[str]:
    """The attributes a fault's label shows, read from the kinds registry: each one its kind
    declares, except one left at a default that says nothing (0, null), then probability.
    A kind this kit does not know (another version's run): every field of its own; one an
    older version spelled the old way is known by its name."""
    cls = IMDS_FAULTS.by_name.get(IMDS_FAULTS.by_name.canonical(fault.get("kind")))
    if cls is None:
        names = [k for k in fault if k not in COMMON_FIELDS]
    else:
        names = [k for k, p in cls.params.items()
                 if p.required or p.default or fault.get(k) != p.default]
    return [*names, "probability"]


def _fault_label(fault: dict) -> str:
    target = fault.get("target") or {}
    what = ", ".join(f"{k}={fmt(v)}" for k, v in target.items())
    extra = "".join(f" {k}={fault[k]}" for k in _label_attributes(fault) if k in fault)
    kind = IMDS_FAULTS.by_name.canonical(fault.get("kind"))
    return f"IMDS {kind}{extra}" + (f" ({what})" if what else "")


def _faults(history, imds_events, instances, mac_eni, eni_instance, t0, t1) -> list[Span]:
    spans: list[Span] = []
    open_: dict[str, Span] = {}
    ours_enis = set(eni_instance)
    macs = set(mac_eni)
    for ev in sorted(imds_events, key=lambda e: e.get("seq", 0)):
        kind = ev.get("type")
        fault = ev.get("fault") or {}
        if kind == "fault_added":
            target = fault.get("target") or {}
            if instances and (
                    ("instance_id" in target and target["instance_id"] not in instances)
                    or ("eni_id" in target and target["eni_id"] not in ours_enis)
                    or ("mac" in target and macs and target["mac"] not in macs)):
                continue
            end = fault.get("expires") or t1
            span = Span(ev["time"], end, _fault_label(fault), "imds", fault)
            open_[fault.get("id")] = span
            spans.append(span)
        elif kind in ("fault_expired", "fault_removed") and fault.get("id") in open_:
            open_.pop(fault["id"]).end = ev["time"]
        elif kind == "fault_ended" and fault.get("id") in open_:
            # Ended by itself on an event (stale-until-change: the next attach/detach).
            span = open_.pop(fault["id"])
            span.end = ev["time"]
            span.label += f", ended: {ev.get('why') or 'by itself'}"
    imds_ids = {str((ev.get("fault") or {}).get("id")) for ev in imds_events
                if ev.get("type") == "fault_added"}
    # The nemesis (cnikit.cluster.nemesis): "start" lasts until the "end" with its id (or
    # its duration, whichever is first), "info" is an instant, "fail" injected nothing.
    nemesis = [e for e in history if e.get("process") == "nemesis"]
    ends: dict[str, float] = {}
    for e in nemesis:
        v = e.get("value") if isinstance(e.get("value"), dict) else {}
        if e.get("type") == "end" and v.get("id") is not None:
            ends.setdefault(str(v["id"]), e["time"])
    for e in nemesis:
        if e.get("type") not in ("start", "info"):
            continue
        f, v = e.get("f", "fault"), e.get("value") if isinstance(e.get("value"), dict) else {}
        fid = str(v["id"]) if v.get("id") is not None else None
        if f == "imds-fault" and fid in imds_ids:
            continue  # drawn from the IMDS's own record
        fields = nemesis_fields(v)
        label = f + "".join(f" {k}={fmt(x)}" for k, x in list(fields.items())[:3])
        dur = v.get("duration")
        if e.get("type") == "info":
            end, instant = e["time"], True
        else:
            end = min(ends.get(fid, t1), e["time"] + dur if isinstance(dur, (int, float)) else t1)
            instant = False
        spans.append(Span(e["time"], end, label, "nemesis", v, instant=instant))
    return [s for s in spans if s.end >= t0 and s.start <= t1]


def _calls(audit, instances, eni_instance, t0, t1) -> list[dict]:
    out = []
    for r in audit:
        t = r.get("time")
        if not isinstance(t, (int, float)) or t < t0 or t > t1:
            continue
        inst = r.get("instance_id") or eni_instance.get(r.get("eni_id"))
        if instances and inst and inst not in instances:
            continue
        out.append(r)
    return out


def _pods(history, t1) -> list[PodTimeline]:
    pods: dict[str, PodTimeline] = {}
    for e in history:
        if e.get("process") != "client" or e.get("type") != "ok":
            continue
        v = e.get("value") or {}
        if e.get("f") == "pod-add" and v.get("pod"):
            pods[v["pod"]] = PodTimeline(v["pod"], v.get("ip", "?"), v.get("instance_id"),
                                         v.get("node"), e["time"], t1)
        elif e.get("f") == "pod-delete" and v.get("pod") in pods:
            p = pods[v["pod"]]
            p.end, p.deleted = e["time"], True
    return list(pods.values())


def value_at(segments: list[Segment], t: float):
    """The set a view showed at t (the last segment starting at or before t)."""
    found = None
    for s in segments:
        if s.start <= t:
            found = s
        else:
            break
    return found.ips if found is not None and t <= found.end else None
