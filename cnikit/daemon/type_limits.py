"""The node's ENI limits, found as upstream's FetchInstanceTypeLimits finds them.

Upstream reads its instance type from IMDS (`instance-type`) and looks it up in its own
generated table (pkg/vpc/vpc_ip_resource_limit.go; here the kit's copy of those figures,
cnikit/cloud/instance_types.json). A type newer than the table is asked of EC2 with
DescribeInstanceTypes: that fallback came in v1.6.0 (aws/amazon-vpc-cni-k8s PR #782), so every
profile has it. A type EC2 does not describe either (a preview type, upstream #2468) fails
nodeInit ("Failed to get ENI limits from file:vpc_ip_limits or EC2"), and aws-node never
starts: `UnknownInstanceType`, which the daemon does not retry.
"""

from __future__ import annotations

from cnikit.cloud.limits import FALLBACK
from cnikit.daemon.apis import ApiError, Ec2Api, Limits

# EC2's answer to DescribeInstanceTypes for a name it does not have.
NOT_A_TYPE = "InvalidInstanceType"


class UnknownInstanceType(Exception):
    """Neither the daemon's table nor EC2 has the node's type: start-up cannot size a pool."""


def instance_limits(ec2: Ec2Api, instance_type: str) -> tuple[Limits, str]:
    """(limits, where they came from: "table" or "ec2") for `instance_type`."""
    known = FALLBACK.get(instance_type)
    if known is not None:
        return Limits(known.max_enis, known.ipv4_per_eni), "table"
    try:
        return ec2.instance_limits(instance_type), "ec2"
    except ApiError as e:
        if e.code != NOT_A_TYPE:
            raise  # throttled or unreachable: start-up retries
        raise UnknownInstanceType(f"no ENI limits for instance type {instance_type}: not in "
                                  f"the daemon's table, and EC2 answers {e.code}") from None
