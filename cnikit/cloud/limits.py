"""Per-instance-type network limits: the kit's table of real instance types.

`instance_types.json` holds a few tens of real types (the ones the kit's scenarios and
targets use, multi-card ones, trn1, t3, Nitro types with IPv6): per type, the IPv4 and IPv6
addresses per ENI (an IPv6 figure of 0: the type has no IPv6), the maximum ENIs of each
network card in card-index order, the EFA interfaces it takes (`efa`, absent: none) and
whether it encrypts traffic in transit. ENIs, IPv4 addresses and cards are the figures of
aws/amazon-vpc-cni-k8s's generated table (pkg/vpc/vpc_ip_resource_limit.go, generated from
DescribeInstanceTypes in 17 regions, as of commit b521883); the IPv6, EFA and encryption
figures, which that table leaves out, are EC2's DescribeInstanceTypes answers as moto 5.2
ships them (tests/unit/test_instance_types.py holds the table to both). Whether a type can
take a trunk ENI is `BRANCH_INTERFACES` below, never a second list.

The gate enforces these limits and serves DescribeInstanceTypes from the same records
(cnikit/cloud/gate/instance_types.py); a type outside the table is looked up upstream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class InstanceLimits:
    max_enis: int  # the whole instance's, every card's together (EC2's MaximumNetworkInterfaces)
    ipv4_per_eni: int
    # EC2 allows as many IPv6 addresses per ENI as IPv4 ones on nearly every type
    # (AssignIpv6Addresses' documentation); None: the IPv4 figure; 0: no IPv6.
    ipv6: int | None = None
    # Each network card's maximum ENIs, by card index; empty: one card holding them all.
    cards: tuple[int, ...] = ()
    efa: int = 0  # EFA (and EFA-only) interfaces the type takes; 0: no EFA
    encryption_in_transit: bool = False

    @property
    def ipv6_per_eni(self) -> int:
        return self.ipv4_per_eni if self.ipv6 is None else self.ipv6

    @property
    def card_limits(self) -> tuple[int, ...]:
        return self.cards or (self.max_enis,)


def _load() -> dict[str, InstanceLimits]:
    raw = json.loads(Path(__file__).with_name("instance_types.json").read_text())
    return {name: InstanceLimits(max_enis=sum(t["cards"]), ipv4_per_eni=t["ipv4"],
                                 ipv6=t["ipv6"], cards=tuple(t["cards"]), efa=t.get("efa", 0),
                                 encryption_in_transit=t.get("encryption_in_transit", False))
            for name, t in raw.items()}


# The table, by type name. (Named for its first use, when the upstream was asked first.)
FALLBACK: dict[str, InstanceLimits] = _load()

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


def can_trunk(instance_type: str) -> bool:
    return bool(BRANCH_INTERFACES.get(instance_type))


def node_types(instance_type: str, instance_types: Sequence[str] | None, nodes: int) -> list[str]:
    """Each node's instance type: `instance_types` one per node (a run mixing types), else
    `instance_type` for every node. A list of another length is refused (ValueError), as
    a node without a type would silently become the default's."""
    if not instance_types:
        return [instance_type] * nodes
    types = list(instance_types)
    if len(types) != nodes:
        raise ValueError(f"instance_types names {len(types)} type(s) for {nodes} node(s): "
                         "give one per node")
    return types
