"""Where a new ENI goes: upstream's subnet discovery (ENABLE_SUBNET_DISCOVERY, v1.18.0 on,
default true; awsutils createENI and GetVpcSubnets).

With discovery on, the VPC's subnets in the node's AZ are listed, most free addresses
first, and a new ENI is tried in each usable one in turn until EC2 makes it:
- upstream before v1.22.0 (validTag): the node's own subnet always, another one when it
  carries the tag `kubernetes.io/role/cni`, whatever its value (even "0");
- hardened, as EKS documents (upstream's isSubnetValidForENICreation, v1.22.0 on): "0"
  excludes a subnet, the node's own too; another subnet needs the tag with another value.
When DescribeSubnets fails (denied, or a subnet it cannot see: upstream #3753), the node's
own subnet alone, as upstream logs "Defaulting to same subnet as the primary interface".
With discovery off, the node's own subnet.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cnikit.daemon.apis import ApiError, SubnetView

if TYPE_CHECKING:
    from cnikit.daemon.ipamd import IpamD

log = logging.getLogger("cnikit.daemon.subnets")

TAG = "kubernetes.io/role/cni"
EXCLUDED = "0"
# EC2's refusals for a subnet with no room: upstream's containsInsufficientCIDRsOrSubnetIPs,
# after which discovery tries the next ENI, then a new ENI in another subnet.
FULL = ("InsufficientFreeAddressesInSubnet", "InsufficientCidrBlocks")


def usable(subnet: SubnetView, own: bool, tag_values: bool) -> bool:
    value = subnet.tags.get(TAG)
    if tag_values and value == EXCLUDED:
        return False
    return own or value is not None


def candidates(d: IpamD) -> list[tuple[str, str]]:
    """(subnet id, its CIDR or "" when not listed) for a new ENI, in the order to try."""
    inst = d.instance
    own = [(inst.subnet_id, "")]
    if not d.cfg.subnet_discovery:
        return own
    try:
        listed = d.ec2.describe_subnets(inst.vpc_id, inst.az)
    except ApiError as e:
        d.metrics.inc("awscni_ipamd_error_count", fn="DescribeSubnets")
        d.record_decision("subnet-discovery-failed", code=e.code)
        log.warning("DescribeSubnets failed (%s): the node's own subnet for the new ENI", e)
        return own
    tag_values = d.cfg.strategy.subnet_tag_values
    ordered = sorted(listed, key=lambda s: s.available, reverse=True)  # a stable sort, as upstream's
    return [(s.subnet_id, s.cidr) for s in ordered
            if usable(s, s.subnet_id == inst.subnet_id, tag_values)]
