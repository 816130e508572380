"""The actions EC2 has: botocore's EC2 service model, read once, when first asked."""

from __future__ import annotations

import functools


@functools.cache
def service_model():
    """botocore's EC2 service model (its operations and their shapes)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("ec2")


@functools.cache
def known_actions() -> frozenset[str]:
    """Every EC2 API action name (DescribeNetworkInterfaces, AssignPrivateIpAddresses, ...)."""
    return frozenset(service_model().operation_names)
