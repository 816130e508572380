"""Subnets: DescribeSubnets, forwarded, with the free-address count EC2 would give."""

from __future__ import annotations

from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region


def with_available_counts(body: bytes, available) -> bytes:
    """A DescribeSubnets answer with each subnet's availableIpAddressCount replaced by
    `available(subnet_id)` (kept where that is None)."""
    root = R.parse_xml(body)
    for s in root.findall("subnetSet/item"):
        count = available(R.text(s, "subnetId"))
        el = s.find("availableIpAddressCount")
        if count is not None and el is not None:
            el.text = str(count)
    return R.document(root)


class SubnetActions(ActionGroup):
    @action("DescribeSubnets")
    async def _describe_subnets(self, r: Region, params, headers) -> tuple[int, bytes]:
        """Forwarded, with AvailableIpAddressCount as EC2 counts it: moto counts neither
        the gate's prefixes nor, reliably, its secondary addresses."""
        status, out = await self.backend.pass_through(r.name, params, headers)
        return status, with_available_counts(out, r.mirror.available_ips)
