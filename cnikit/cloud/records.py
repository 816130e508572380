"""The records the gate's mirror holds (models.Mirror), as EC2 describes them: subnets,
ENIs with their attachments, instances. Frozen: the mirror replaces a record on a change,
so a copy of its dicts is a snapshot.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from cnikit.cloud.errors import invalid_value


@dataclass(frozen=True)
class Subnet:
    subnet_id: str
    vpc_id: str
    cidr: ipaddress.IPv4Network
    az: str
    default_for_az: bool = False

    @property
    def first_usable(self) -> int:
        return int(self.cidr.network_address) + 4

    @property
    def last_usable(self) -> int:
        return int(self.cidr.broadcast_address) - 1

    def check_address(self, ip: str) -> int:
        """The address as an int, or InvalidParameterValue when EC2 would refuse it."""
        try:
            addr = ipaddress.IPv4Address(ip)
        except ValueError:
            raise invalid_value(f"Invalid value '{ip}' for IP address") from None
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

    @property
    def primary_ip(self) -> str:
        return self.ips[0]

    @property
    def slots(self) -> int:
        return len(self.ips) + len(self.prefixes)


@dataclass(frozen=True)
class InstanceState:
    """An instance as the gate's mirror holds it (cnikit.cloud.Instance is what the kit
    launched, with its primary ENI)."""

    instance_id: str
    instance_type: str
    subnet_id: str
    az: str
    state: str = "running"
