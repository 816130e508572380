"""Subnets: DescribeSubnets, forwarded, with the free-address count EC2 would give."""

from __future__ import annotations

from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import Actions, action
from cnikit.cloud.gate.backend import Region, UpstreamError


class SubnetActions(Actions):
    @action("DescribeSubnets")
    async def _describe_subnets(self, r: Region, params, headers) -> tuple[int, bytes]:
        """Forwarded, with AvailableIpAddressCount as EC2 counts it: moto counts neither
        the gate's prefixes nor, reliably, its secondary addresses."""
        status, out = await self._forward(r.name, params, headers)
        if status >= 300:
            raise UpstreamError(status, out)
        return status, R.with_available_counts(out, r.mirror.available_ips)
