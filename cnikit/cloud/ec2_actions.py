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


@functools.cache
def service_model():
    """botocore's EC2 service model (its operations and their shapes)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("ec2")


@functools.cache
def known_actions() -> frozenset[str]:
    """Every EC2 API action name (DescribeNetworkInterfaces, AssignPrivateIpAddresses, ...)."""
    return frozenset(service_model().operation_names)
