"""The two views of the world the daemon reads: EC2 (the truth) and IMDS (a possibly stale copy).

Both are small protocols so the logic runs against in-memory fakes in unit tests and
against EC2 Query API and IMDSv2 clients in the daemon process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class ApiError(Exception):
    """An EC2 or IMDS call failed (throttled, 5xx, timeout, refused). `code` as EC2 names it."""

    def __init__(self, message: str, code: str = "Error"):
        super().__init__(message)
        self.code = code


@dataclass
class EniView:
    """One ENI as a view reports it. `ips` lists the primary IP first."""

    eni_id: str
    mac: str = ""
    device_index: int | None = None
    primary_ip: str = ""
    ips: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    subnet_id: str = ""
    # IMDS's subnet-ipv4-cidr-block: None when IMDS answered 404 (an ENI of an IPv6-only
    # subnet); "" when not known.
    subnet_cidr: str | None = ""
    attachment_id: str | None = None
    instance_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # EC2's attachment status ("attaching", "attached", "detaching"); None from IMDS.
    attachment_status: str | None = None
    ipv6s: list[str] = field(default_factory=list)
    ipv6_prefixes: list[str] = field(default_factory=list)  # delegated /80s
    # IMDS's subnet-ipv6-cidr-blocks: "" when not read, None when IMDS answered 404 (an
    # ENI of an IPv4-only subnet, upstream #3489).
    subnet_ipv6_cidr: str | None = ""

    @property
    def secondary_ips(self) -> list[str]:
        return [ip for ip in self.ips if ip != self.primary_ip]


@dataclass
class InstanceInfo:
    instance_id: str
    instance_type: str
    subnet_id: str
    security_groups: list[str]
    primary_eni_id: str
    primary_ip: str
    vpc_id: str = ""
    az: str = ""


@dataclass
class SubnetView:
    """One subnet as DescribeSubnets shows it: where subnet discovery may put a new ENI."""

    subnet_id: str
    cidr: str
    available: int
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class Limits:
    max_enis: int
    ipv4_per_eni: int  # including the ENI's primary IP, as EC2 counts


class Ec2Api(Protocol):
    def describe_instance(self, instance_id: str) -> InstanceInfo: ...

    def instance_limits(self, instance_type: str) -> Limits: ...

    def describe_enis(self, instance_id: str) -> list[EniView]:
        """ENIs attached to the instance, with their IPs and prefixes."""

    def describe_eni(self, eni_id: str) -> EniView | None:
        """One ENI, or None when EC2 says it does not exist."""

    def describe_tagged_enis(self, tag: str, value: str) -> list[EniView]:
        """ENIs carrying tag=value, attached or not (to find ENIs a failed attach left)."""

    def describe_subnets(self, vpc_id: str, az: str) -> list[SubnetView]:
        """The VPC's subnets in the AZ, with their tags and free address counts."""

    def create_eni(self, subnet_id: str, security_groups: list[str], tags: dict[str, str],
                   secondary_ips: int) -> EniView: ...

    def attach_eni(self, eni_id: str, instance_id: str, device_index: int) -> str: ...

    def detach_eni(self, attachment_id: str) -> None: ...

    def delete_eni(self, eni_id: str) -> None: ...

    def assign_ips(self, eni_id: str, count: int) -> list[str]: ...

    def unassign_ips(self, eni_id: str, ips: list[str]) -> None: ...

    def assign_prefixes(self, eni_id: str, count: int) -> list[str]: ...

    def unassign_prefixes(self, eni_id: str, prefixes: list[str]) -> None: ...

    def assign_ipv6_prefixes(self, eni_id: str, count: int) -> list[str]: ...


@dataclass
class Identity:
    instance_id: str
    instance_type: str
    primary_mac: str
    region: str = "us-east-1"
    az: str = ""


class ImdsApi(Protocol):
    def identity(self) -> Identity: ...

    def enis(self, ipv6: bool = False) -> list[EniView]:
        """Every ENI under network/interfaces/macs/, as IMDS shows it right now; with
        `ipv6`, each one's ipv6s, ipv6-prefix and subnet-ipv6-cidr-blocks too."""
