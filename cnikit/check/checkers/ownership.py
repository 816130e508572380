from __future__ import annotations

import ipaddress

from cnikit.check.checkers.base import Checker


class Ownership(Checker):
    """Every pod IP is held in EC2 by an ENI of the pod's own node, as an address or inside
    a prefix on one (an IPv4 /28, an IPv6 /80: the monitor records both families alike)."""

    kind = "ip-not-owned"
    order = 30
    excusable = True  # an address the nemesis took is not the node's by its act
    colour, legend = "#ff9da7", "pod IP not held by its node in EC2"
    outcome_predicate = "kept an address EC2 no longer gave the node"

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.ips: dict[str, list] = {}
        self.prefixes: dict[str, list] = {}
        self.known = False

    def owner(self, ip: str) -> str | None:
        held = self.holder(ip)
        return held[0] if held else None

    def holder(self, ip: str) -> list | None:
        """[instance, eni] of whatever holds ip in EC2 (an address, or a prefix with it)."""
        o = self.ips.get(ip)
        if o is not None:
            return o[:2]
        addr = ipaddress.ip_address(ip)
        for cidr, p in self.prefixes.items():
            if addr in ipaddress.ip_network(cidr):
                return p[:2]
        return None

    @classmethod
    def describe(cls, v: dict, pods: dict[str, dict]) -> dict:
        d = v.get("detail") or {}
        return {"pod": v["subject"], "ip": d.get("ip"),
                "what": f"EC2 assigns it to {d.get('held_by') or 'nobody'}, not the pod's node "
                        f"{d.get('node')}"}

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str:
        return f"pod {v.get('subject')}'s IP {ip} no longer held by its node in EC2"

    @classmethod
    def sentence(cls, v: dict, say) -> str:
        subject, d = v.get("subject"), v.get("detail") or {}
        ip = d.get("ip", "?")
        held = d.get("held_by")
        s = (f"pod {subject}'s IP {ip} was not held by its node {d.get('node')} in EC2 "
             f"{say.span}" + (f" (held by {held})" if held else " (held by no instance)"))
        pod = say.pod(subject)
        why = say.cause(ip, v.get("since"), pod.start if pod else None)
        return s + (f" because {why}" if why else "") + say.root

    def step(self, e: dict, state) -> None:
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if e["process"] == "monitor" and f == "ownership":
            if v.get("full"):
                self.ips, self.prefixes = {}, {}
            self.ips.update(v.get("set", {}))
            for ip in v.get("unset", []):
                self.ips.pop(ip, None)
            self.prefixes.update(v.get("prefixes_set", {}))
            for cidr in v.get("prefixes_unset", []):
                self.prefixes.pop(cidr, None)
            self.known = True
            pods = list(state.pods)
        elif e["process"] == "client" and e["type"] == "ok" and f in (
                "pod-add", "pod-delete", "pod-deleting", "pod-kept"):
            pods = [v.get("pod")]
        else:
            return
        if not self.known:
            return
        for name in pods:
            pod = state.pods.get(name)
            if pod is None:
                self._close(name, at)
                continue
            holder = self.owner(pod["ip"])
            if holder != pod["instance_id"]:
                self._open(name, at, ip=pod["ip"], node=pod["instance_id"], held_by=holder)
            else:
                self._close(name, at)
