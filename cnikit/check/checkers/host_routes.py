from __future__ import annotations

from cnikit.check.checkers.base import WARNING, Checker, canonical_ip
from cnikit.check.checkers.ownership import Ownership
from cnikit.check.history import MONITOR
from cnikit.check.hostnet import HOST_NET

DEFAULTS = ("default", "::/0")
MAIN = 254


def host(ip: str) -> str:
    return f"{ip}/128" if ":" in ip else f"{ip}/32"


class NodeView:
    """One node's rules and routes from a host-net entry (cnikit.check.hostnet)."""

    def __init__(self, v: dict) -> None:
        self.enis: dict[str, str] = v.get("enis") or {}
        self.rules = sorted((tuple(r) for r in v.get("rules") or ()), key=lambda r: r[0])
        self.tables: dict[int, list] = {}
        for table, dst, ifname, gw in v.get("routes") or ():
            self.tables.setdefault(table, []).append((dst, ifname, gw))

    def from_tables(self, ip: str) -> list[int]:
        """The tables the rules for packets from ip look up, first first."""
        return [t for _p, src, _d, t in self.rules if src == host(ip)]

    def exit_of(self, table: int) -> str | None:
        """The interface a table's default route leaves by, None when it has none."""
        return next((i for dst, i, _g in self.tables.get(table, ()) if dst in DEFAULTS), None)

    def egress(self, ip: str) -> tuple[int | None, str | None]:
        """(table, interface) of the pod's replies to a peer off the node: the first of its
        source rules' tables with a default route, else the main table's (a table with no
        route to the destination is passed over, as the kernel passes it over)."""
        for t in self.from_tables(ip):
            out = self.exit_of(t)
            if out is not None:
                return t, out
        return None, self.exit_of(MAIN)

    def host_routed(self, ip: str) -> str | None:
        """The interface the host route to ip names, in main or a table a rule to ip names."""
        tables = [t for _p, _s, dst, t in self.rules if dst == host(ip)] + [MAIN]
        return next((i for t in tables for dst, i, _g in self.tables.get(t, ())
                     if dst == host(ip)), None)

    def named(self) -> set[str]:
        """The addresses the per-address rules name."""
        return {canonical_ip(x.split("/")[0]) for _p, src, dst, _t in self.rules
                for x in (src, dst) if x and x.endswith(("/32", "/128"))}


class HostRoutes(Checker):
    """Each node's per-pod policy routing, read from the kernel (cnikit.check.hostnet),
    against the live pods and EC2's ENI of each pod's address. What is judged is only what
    contradicts a live pod's reachability, so a build with no policy routing at all (one
    route table) is never failed for it:

      misroute       the pod's source rule leads to a table whose default route leaves by
                     another ENI than the one EC2 gives its address (cilium #39839), or to
                     an empty table, so its replies fall through to the main table's ENI;
      missing-rule   on a node whose build routes its pods by source rules, a pod on an ENI
                     other than the main table's has none: its replies leave by the wrong
                     ENI, and the VPC's source check drops them (upstream #3309);
      no-host-route  the host route to the pod, seen since its ADD, is gone or leaves by an
                     ENI: nothing reaches the pod (a veth or a table flushed);
      leaked-rule    a rule names an address no pod of the node holds (a DEL that left it):
                     a warning, a violation when certifying, like the `leak` checker's.

    Each must hold for `grace` (two leak graces: a build that reconciles its rules has that
    long to restore them) before it is reported, and closes once the kernel agrees again."""

    kind = "host-route"
    order = 45
    colour, legend = "#000080", "node's rules or routes contradict the pod's ENI"
    subject_names = "ip"

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.leak_grace = float(self.options.get("leak_grace", 60.0))
        self.grace = 2 * self.leak_grace
        self.strict = bool(self.options.get("strict_leaks"))
        self.views: dict[str, NodeView] = {}  # instance -> its node's latest view
        self.policy: set[str] = set()  # instances whose build routes pods by source rules
        self.routed: set[str] = set()  # pods whose host route the kernel has shown
        self.since: dict[tuple[str, str], float] = {}  # (ip, why) -> first seen

    def step(self, e: dict, state) -> None:
        f, v, at, proc = e["f"], e["value"] or {}, e["time"], e["process"]
        if proc == MONITOR and f == HOST_NET:
            self.views[v["instance_id"]] = NodeView(v)
        elif not (proc == "prober" and f == "stats") and not (
                proc == "client" and e["type"] == "ok"):
            return
        ownership = state.checker(Ownership.kind)
        if ownership is None or not ownership.known:
            return
        found: dict[tuple[str, str], dict] = {}
        for instance, view in self.views.items():
            found.update(self._judge(instance, view, state, ownership))
        for key, detail in found.items():
            first = self.since.setdefault(key, at)
            grace = self.leak_grace if key[1] == "leaked-rule" else self.grace
            if at - first >= grace:
                self._open(key[0], first + grace, **detail)
                if key[1] == "leaked-rule" and not self.strict:
                    self.open[key[0]].severity = WARNING
        for key in [k for k in self.since if k not in found]:
            del self.since[key]
            if key[0] in self.open and self.open[key[0]].detail.get("why") == key[1]:
                self._close(key[0], at)

    def _judge(self, instance: str, view: NodeView, state, ownership) -> dict:
        out: dict[tuple[str, str], dict] = {}
        pods = {p: d for p, d in state.pods.items() if d.get("instance_id") == instance}
        held = {d["ip"] for d in pods.values()}
        if any(view.from_tables(d["ip"]) for d in pods.values()):
            self.policy.add(instance)
        main_exit = view.exit_of(MAIN)
        for pod, d in pods.items():
            ip = d["ip"]
            holder = ownership.holder(ip)
            eni = holder[1] if holder and holder[0] == instance else None
            base = {"ip": ip, "pods": [pod], "node": instance, "eni": eni}
            routed = view.host_routed(ip)
            if routed is not None and routed not in view.enis:
                self.routed.add(pod)
            elif pod in self.routed:
                out[(ip, "no-host-route")] = {**base, "why": "no-host-route", "what": (
                    f"the node's route to {ip} leaves by {routed}" if routed else
                    f"the node has no route to {ip} any more")}
                continue
            if eni is None:
                continue  # not the node's in EC2: the ownership checker's to judge
            table, out_if = view.egress(ip)
            if out_if is None or out_if not in view.enis or view.enis[out_if] == eni:
                continue
            if view.from_tables(ip):
                why, what = "misroute", (
                    f"replies from {ip} leave by {out_if} ({view.enis[out_if]}) through "
                    f"table {table if table is not None else 'main'}, but EC2 gives {ip} "
                    f"to {eni}")
            elif instance in self.policy and main_exit == out_if:
                why, what = "missing-rule", (
                    f"no rule routes replies from {ip} by its ENI {eni}: they leave by "
                    f"{out_if} ({view.enis[out_if]})")
            else:
                continue  # one route table for every pod: the build's design, not judged
            out[(ip, why)] = {**base, "why": why, "what": what}
        for ip in view.named() - held:
            holder = ownership.ips.get(ip)
            if holder is not None and holder[2]:
                continue  # an ENI's own address: the node's, not a pod's
            out[(ip, "leaked-rule")] = {"ip": ip, "pods": [], "node": instance,
                                        "why": "leaked-rule", "what": (
                                            f"a rule still names {ip}, which no pod of "
                                            f"{instance} holds")}
        return out

    @classmethod
    def describe(cls, v: dict, pods: dict[str, dict]) -> dict:
        d = v.get("detail") or {}
        return {"pod": ",".join(d.get("pods") or ()) or None, "ip": d.get("ip") or v["subject"],
                "what": f"{d.get('why')}: {d.get('what')}"}

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str:
        d = v.get("detail") or {}
        return f"{ip}'s routing on its node: {d.get('why')}"

