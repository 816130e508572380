"""The records the gate's mirror holds (models.Mirror), as EC2 describes them: subnets,
ENIs with their attachments, instances. Frozen: the mirror replaces a record on a change,
so a copy of its dicts is a snapshot.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from cnikit.cloud.errors import invalid_value

# A delegated IPv6 prefix is a /80 (EC2 gives no other size); its index in the subnet is
# the address shifted right by the 48 host bits.
IPV6_PREFIX_LEN = 80
IPV6_HOST_BITS = 128 - IPV6_PREFIX_LEN


@dataclass(frozen=True)
class Subnet:
    subnet_id: str
    vpc_id: str
    cidr: ipaddress.IPv4Network | None  # None: an IPv6-only subnet
    az: str
    default_for_az: bool = False
    ipv6_cidr: ipaddress.IPv6Network | None = None  # the /64 of a dual-stack or IPv6-only one
    assign_ipv6_on_creation: bool = False  # AssignIpv6AddressOnCreation

    @property
    def first_usable(self) -> int:
        return int(self.cidr.network_address) + 4 if self.cidr else 1

    @property
    def last_usable(self) -> int:
        return int(self.cidr.broadcast_address) - 1 if self.cidr else 0

    # EC2 reserves the first four and the last IPv6 address of a subnet's block, as for IPv4.
    @property
    def first_usable_v6(self) -> int:
        return int(self.ipv6_cidr.network_address) + 4

    @property
    def last_usable_v6(self) -> int:
        return int(self.ipv6_cidr.broadcast_address) - 1

    def check_ipv6(self, ip: str) -> int:
        """An IPv6 address as an int, or EC2's refusal: the subnet has no IPv6 block, the
        address is malformed, outside the subnet's /64 or reserved by AWS."""
        if self.ipv6_cidr is None:
            raise invalid_value(f"Subnet {self.subnet_id} has no IPv6 CIDR block")
        try:
            addr = ipaddress.IPv6Address(ip)
        except ValueError:
            raise invalid_value(f"Invalid value '{ip}' for IPv6 address") from None
        if addr not in self.ipv6_cidr:
            raise invalid_value(
                f"Address {ip} does not fall within the subnet's IPv6 address range")
        value = int(addr)
        if not self.first_usable_v6 <= value <= self.last_usable_v6:
            raise invalid_value(
                f"Address {ip} is reserved by AWS in subnet {self.subnet_id} ({self.ipv6_cidr})")
        return value

    def check_address(self, ip: str) -> int:
        """The address as an int, or InvalidParameterValue when EC2 would refuse it."""
        try:
            addr = ipaddress.IPv4Address(ip)
        except ValueError:
            raise invalid_value(f"Invalid value '{ip}' for IP address") from None
        if self.cidr is None:
            raise invalid_value(f"Subnet {self.subnet_id} is IPv6-only: it has no IPv4 "
                                f"address {ip}")
        if addr not in self.cidr:
            raise invalid_value(
                f"Address {ip} does not fall within the subnet's address range"
            )
        value = int(addr)
        if not self.first_usable <= value <= self.last_usable:
            raise invalid_value(
                f"Address {ip} is reserved by AWS in subnet {self.subnet_id} ({self.cidr})"
            )
        return value


@dataclass(frozen=True)
class Attachment:
    attachment_id: str
    instance_id: str
    device_index: int
    delete_on_termination: bool
    status: str = "attached"
    attach_time: str = ""
    network_card_index: int = 0  # the gate's alone: moto puts every ENI on card 0


@dataclass(frozen=True)
class Eni:
    eni_id: str
    subnet_id: str
    vpc_id: str
    mac: str
    ips: tuple[str, ...]  # primary first
    prefixes: tuple[str, ...] = ()
    attachment: Attachment | None = None
    # The upstream's own XML <item> for this ENI: everything the gate does not model
    # (tags, groups, description) is rendered from it unchanged.
    template: bytes = b""
    ipv6s: tuple[str, ...] = ()  # compressed form, in the order assigned
    ipv6_prefixes: tuple[str, ...] = ()  # delegated /80s
    # "interface", "trunk", or "branch" while associated with a trunk (trunks.py's rules).
    interface_type: str = "interface"

    @property
    def primary_ip(self) -> str:
        return self.ips[0] if self.ips else ""

    @property
    def slots(self) -> int:
        return len(self.ips) + len(self.prefixes)

    @property
    def ipv6_slots(self) -> int:
        """What counts against the instance type's IPv6 addresses per ENI: each address,
        and each /80 prefix as one (as /28s count against the IPv4 limit)."""
        return len(self.ipv6s) + len(self.ipv6_prefixes)


@dataclass(frozen=True)
class TrunkAssociation:
    """A branch ENI on a trunk ENI (AssociateTrunkInterface): its traffic reaches the
    trunk's instance tagged with `vlan_id` (protocol VLAN) or keyed by `gre_key` (GRE)."""

    association_id: str  # trunk-assoc-<17 hex digits>, as EC2's other ids
    branch_id: str
    trunk_id: str
    protocol: str  # "VLAN" or "GRE"
    vlan_id: int | None = None
    gre_key: int | None = None


@dataclass(frozen=True)
class InstanceState:
    """An instance as the gate's mirror holds it (cnikit.cloud.Instance is what the kit
    launched, with its primary ENI)."""

    instance_id: str
    instance_type: str
    subnet_id: str
    az: str
    state: str = "running"
