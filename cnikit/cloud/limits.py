"""Per-instance-type network limits: ENIs per instance, IPv4 addresses per ENI.

The gate asks the upstream (DescribeInstanceTypes) first, because moto and LocalStack know
hundreds of types; this table is the fallback when the upstream does not answer, and the
figures are AWS's published ones.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceLimits:
    max_enis: int
    ipv4_per_eni: int
    # EC2 allows as many IPv6 addresses per ENI as IPv4 ones on nearly every type
    # (AssignIpv6Addresses' documentation); None: the IPv4 figure.
    ipv6: int | None = None

    @property
    def ipv6_per_eni(self) -> int:
        return self.ipv4_per_eni if self.ipv6 is None else self.ipv6


# AWS's figures (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/AvailableIpPerENI.html).
FALLBACK: dict[str, InstanceLimits] = {
    "t3.nano": InstanceLimits(2, 2),
    "t3.micro": InstanceLimits(2, 2),
    "t3.small": InstanceLimits(3, 4),
    "t3.medium": InstanceLimits(3, 6),
    "t3.large": InstanceLimits(3, 12),
    "t3.xlarge": InstanceLimits(4, 15),
    "m5.large": InstanceLimits(3, 10),
    "m5.xlarge": InstanceLimits(4, 15),
    "m5.2xlarge": InstanceLimits(4, 15),
    "m5.4xlarge": InstanceLimits(8, 30),
    "c5.large": InstanceLimits(3, 10),
    "c5.xlarge": InstanceLimits(4, 15),
    "r5.large": InstanceLimits(3, 10),
}

# An ENI that is attached to no instance: AWS allows up to 50 addresses on it.
UNATTACHED = InstanceLimits(max_enis=0, ipv4_per_eni=50)

# Branch ENIs a trunk may carry, per instance type; a type missing here cannot take a trunk
# (ENI trunking). EC2 publishes neither figure through an API (DescribeInstanceTypes has
# none), so they come from aws/amazon-vpc-resource-controller-k8s, pkg/aws/vpc/limits.go
# (BranchInterface where IsTrunkingCompatible; generated 2026-03-20). The t3 and t3a
# families, m4 and the older types are not trunking-compatible there.
BRANCH_INTERFACES: dict[str, int] = {
    "m5.large": 9, "m5.xlarge": 18, "m5.2xlarge": 38, "m5.4xlarge": 54, "m5.8xlarge": 54,
    "m5.12xlarge": 54, "m5a.large": 9,
    "c5.large": 9, "c5.xlarge": 18, "c5.2xlarge": 38, "c5.4xlarge": 54,
    "r5.large": 9, "r5.xlarge": 18, "r5.2xlarge": 38,
    "m6i.large": 9, "m6i.xlarge": 18, "c6i.large": 9, "c6i.xlarge": 18, "r6i.large": 9,
    "m7i.large": 9, "c7i.large": 9,
}
