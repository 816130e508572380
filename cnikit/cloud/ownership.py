"""Who owns each IP and prefix right now, according to EC2 (the gate's mirror).

An OwnershipSnapshot is immutable and built (`build_snapshot`, from the mirror's ENIs) once
per mirror version, so polling it many times a second costs a dict lookup. `to_json()` is
the wire form of `GET /_cnikit/owners`.

A snapshot covers one region (`region`), as EC2 keeps regions apart: the same address can
be held in two regions. `regions` lists every region the gate serves, so a follower of the
default region's snapshot (the fault IMDS) learns of the others; `version` is shared by all
regions, so it grows on a change in any of them.

ENI trunking: each EniInfo names its `interface_type`; a branch ENI (attached to no
instance) names its trunk, VLAN id and association, and reaches the trunk's instance: its
addresses belong to the pod the branch was given, on that VLAN.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from cnikit.cloud.records import Eni, TrunkAssociation


@dataclass(frozen=True)
class Owner:
    eni_id: str
    instance_id: str | None
    device_index: int | None
    primary: bool


@dataclass(frozen=True)
class EniInfo:
    eni_id: str
    instance_id: str | None
    device_index: int | None
    mac: str
    primary_ip: str
    subnet_id: str
    ips: list[str] = field(default_factory=list)  # primary first
    prefixes: list[str] = field(default_factory=list)
    # The attachment's status: "attached", or "attaching"/"detaching" while the gate's
    # slow-attachment fault holds it; None when attached nowhere (available).
    attachment_status: str | None = None
    ipv6s: list[str] = field(default_factory=list)
    ipv6_prefixes: list[str] = field(default_factory=list)  # delegated /80s
    interface_type: str = "interface"  # or "trunk", "branch", "efa"
    trunk_eni_id: str | None = None  # a branch's trunk, its VLAN id and association
    vlan_id: int | None = None
    association_id: str | None = None


@dataclass(frozen=True)
class OwnershipSnapshot:
    version: int
    ips: dict[str, Owner]
    prefixes: dict[str, Owner]
    enis: dict[str, EniInfo]
    region: str = "us-east-1"
    regions: tuple[str, ...] = ()
    # IPv6 apart from IPv4, so that a reader of `ips` and `prefixes` meets only the family
    # it always knew; a dual-stack reader takes both.
    ipv6s: dict[str, Owner] = field(default_factory=dict)
    ipv6_prefixes: dict[str, Owner] = field(default_factory=dict)

    def reached_instance(self, eni_id: str) -> str | None:
        """The instance an ENI's traffic reaches: the one it is attached to, or a branch's
        trunk's; None for an ENI that reaches none."""
        info = self.enis.get(eni_id)
        if info is not None and info.trunk_eni_id is not None:
            info = self.enis.get(info.trunk_eni_id)
        return info.instance_id if info is not None else None

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "ips": {ip: asdict(o) for ip, o in self.ips.items()},
            "prefixes": {p: asdict(o) for p, o in self.prefixes.items()},
            "enis": {e: asdict(i) for e, i in self.enis.items()},
            "region": self.region,
            "regions": list(self.regions),
            "ipv6s": {ip: asdict(o) for ip, o in self.ipv6s.items()},
            "ipv6_prefixes": {p: asdict(o) for p, o in self.ipv6_prefixes.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> OwnershipSnapshot:
        return cls(
            version=data["version"],
            ips={ip: Owner(**o) for ip, o in data["ips"].items()},
            prefixes={p: Owner(**o) for p, o in data["prefixes"].items()},
            enis={e: EniInfo(**i) for e, i in data["enis"].items()},
            region=data.get("region", "us-east-1"),
            regions=tuple(data.get("regions", ())),
            ipv6s={ip: Owner(**o) for ip, o in data.get("ipv6s", {}).items()},
            ipv6_prefixes={p: Owner(**o) for p, o in data.get("ipv6_prefixes", {}).items()},
        )


def build_snapshot(version: int, enis: dict[str, Eni], region: str = "us-east-1",
                   regions: tuple[str, ...] = (),
                   associations: dict[str, TrunkAssociation] | None = None) -> OwnershipSnapshot:
    ips: dict[str, Owner] = {}
    prefixes: dict[str, Owner] = {}
    infos: dict[str, EniInfo] = {}
    ipv6s: dict[str, Owner] = {}
    ipv6_prefixes: dict[str, Owner] = {}
    trunk_of = {a.branch_id: a for a in (associations or {}).values()}
    for eni in enis.values():
        att = eni.attachment
        inst = att.instance_id if att else None
        dev = att.device_index if att else None
        for n, ip in enumerate(eni.ips):
            ips[ip] = Owner(eni.eni_id, inst, dev, primary=(n == 0))
        for p in eni.prefixes:
            prefixes[p] = Owner(eni.eni_id, inst, dev, primary=False)
        for ip in eni.ipv6s:
            ipv6s[ip] = Owner(eni.eni_id, inst, dev, primary=False)
        for p in eni.ipv6_prefixes:
            ipv6_prefixes[p] = Owner(eni.eni_id, inst, dev, primary=False)
        assoc = trunk_of.get(eni.eni_id)
        infos[eni.eni_id] = EniInfo(eni.eni_id, inst, dev, eni.mac, eni.primary_ip,
                                    eni.subnet_id, list(eni.ips), list(eni.prefixes),
                                    att.status if att else None, list(eni.ipv6s),
                                    list(eni.ipv6_prefixes), eni.interface_type,
                                    assoc.trunk_id if assoc else None,
                                    assoc.vlan_id if assoc else None,
                                    assoc.association_id if assoc else None)
    return OwnershipSnapshot(version, ips, prefixes, infos, region, regions or (region,),
                             ipv6s, ipv6_prefixes)
