"""The actions EC2 has: botocore's EC2 service model, read once, when first asked."""

from __future__ import annotations

import functools

# EC2's non-mutating actions, as its API request throttling sorts them (Describe*, Get*,
# List*, Search*): the gate forwards them without a resync, and throttling's `category`
# scope gives them their own bucket.
READ_PREFIXES = ("Describe", "Get", "List", "Search")


def is_read(action: str) -> bool:
    """Whether the action only reads (EC2's non-mutating category)."""
    return action.startswith(READ_PREFIXES)


# Writes that change only ENIs and their addresses: what the owners feed's version follows.
# Every other write may change instances, subnets or VPCs (a launch, a termination, a tag, a
# CIDR block): readers that keep those (the fault IMDS) refresh them on `world` writes alone.
ENI_WRITES = frozenset({
    "AssignPrivateIpAddresses", "UnassignPrivateIpAddresses", "AssignIpv6Addresses",
    "UnassignIpv6Addresses", "CreateNetworkInterface", "DeleteNetworkInterface",
    "AttachNetworkInterface", "DetachNetworkInterface", "ModifyNetworkInterfaceAttribute",
    "AssociateTrunkInterface", "DisassociateTrunkInterface",
})


def is_world_write(action: str) -> bool:
    """Whether the action may change what an instance, subnet or VPC looks like."""
    return not is_read(action) and action not in ENI_WRITES


@functools.cache
def service_model():
    """botocore's EC2 service model (its operations and their shapes)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("ec2")


@functools.cache
def known_actions() -> frozenset[str]:
    """Every EC2 API action name (DescribeNetworkInterfaces, AssignPrivateIpAddresses, ...)."""
    return frozenset(service_model().operation_names)
