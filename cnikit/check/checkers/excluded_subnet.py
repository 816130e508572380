from __future__ import annotations

import ipaddress

from cnikit.check.checkers.base import VIOLATION, EniChecker

# The history's process of the scenario's own markers (cnikit.scenarios.engine.outcomes, a
# layer above the checkers): a scenario that takes a subnet out of subnet discovery says
# so there, once EC2 shows the subnet's new tags and the build has had time to read them.
SCENARIO = "scenario"
EXCLUDED = "subnet-excluded"


class ExcludedSubnet(EniChecker):
    """No new ENI of a node in a subnet the operator took out of subnet discovery
    (`kubernetes.io/role/cni` removed, or set to 0 as EKS documents it) while the nodes
    ran: cilium/cilium #32346, where pods kept getting addresses from untagged subnets
    after the operator meant to empty them. Upstream's VPC CNI reads the subnets again for
    each new ENI. Judged from EC2's truth (the monitor's ownership: an ENI of a run's node
    first seen holding an address of the excluded subnet's CIDR), against the scenario's
    `subnet-excluded` marker (subnet, cidr). ENIs already in the subnet may keep serving."""

    kind = "excluded-subnet"
    severity = VIOLATION
    order = 46
    subject_names = "eni"  # neither a pod nor an address: no pod lane, no IP story

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.excluded: dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
        self.enis: set[str] = set()  # every ENI of the run's nodes seen so far

    def step(self, e: dict, run) -> None:
        proc, f, v, at = e["process"], e["f"], e["value"] or {}, e["time"]
        if proc == SCENARIO and f == EXCLUDED:
            self.excluded[v["subnet"]] = ipaddress.ip_network(v["cidr"])
        elif proc == "monitor" and f == "ownership":
            for ip, (instance, eni, *_) in (v.get("set") or {}).items():
                if eni in self.enis:
                    continue
                self.enis.add(eni)
                subnet = self._excluded_holding(ip)
                if subnet is not None:
                    what = (f"{eni} made on {instance} in {subnet} ({self.excluded[subnet]}) "
                            "after that subnet was taken out of subnet discovery")
                    self._open(eni, at, eni=eni, node=instance, subnet=subnet, ip=ip,
                               what=what)

    def _excluded_holding(self, ip: str) -> str | None:
        addr = ipaddress.ip_address(ip)
        return next((s for s, net in self.excluded.items()
                     if addr.version == net.version and addr in net), None)

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str | None:
        d = v.get("detail") or {}
        return f"{v.get('subject')} made in excluded subnet {d.get('subnet')}"
