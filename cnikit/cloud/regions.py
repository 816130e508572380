"""The regions the gate serves: every region botocore knows EC2 in."""

from __future__ import annotations

import functools

from cnikit.errors import UsageError


@functools.cache
def known_regions() -> frozenset[str]:
    """Every region botocore knows EC2 in, in every partition (moto serves the same list)."""
    import botocore.session

    session = botocore.session.get_session()
    return frozenset(r for p in session.get_available_partitions()
                     for r in session.get_available_regions("ec2", p))


def check_region(name: str) -> str:
    if name not in known_regions():
        raise UsageError(f"unknown AWS region {name!r} (e.g. us-east-1, us-west-2, eu-west-1)")
    return name
