"""IPv6 addresses and /80 prefixes on an ENI: AssignIpv6Addresses and UnassignIpv6Addresses.

moto keeps the IPv6 addresses it is given but picks its own for a count (at random, so two
ENIs can draw the same one) and ignores prefixes: the gate picks every address and tells the
upstream only explicit ones; /80 prefixes live in the gate alone, as /28s do.
"""

from __future__ import annotations

from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import Actions, action
from cnikit.cloud.gate.backend import Region


class Ipv6Actions(Actions):
    @action("AssignIpv6Addresses")
    async def _assign_ipv6(self, r: Region, params, headers) -> tuple[int, bytes]:
        mirror = r.mirror
        async with self._lock:
            eni = await self._eni_with_limits(r, params.get("NetworkInterfaceId"))
            plan = mirror.plan_assign_ipv6(
                eni.eni_id,
                R.list_param(params, "Ipv6Addresses"),
                R.int_param(params, "Ipv6AddressCount"),
                R.list_param(params, "Ipv6Prefix"),
                R.int_param(params, "Ipv6PrefixCount"),
            )
            if plan.ips:
                await self._call(r.name, "AssignIpv6Addresses",
                                 R.ipv6_addresses_param(eni.eni_id, plan.ips), headers)
            self._mutate(r, mirror.apply_assign_ipv6, plan)
            self.audit.add("AssignIpv6Addresses", eni.eni_id, plan.ips, plan.prefixes,
                           region=r.name)
        return 200, R.assign_ipv6_xml(eni.eni_id, plan.ips, plan.prefixes)

    @action("UnassignIpv6Addresses")
    async def _unassign_ipv6(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            eni, ips, prefixes = r.mirror.plan_unassign_ipv6(
                params.get("NetworkInterfaceId"), R.list_param(params, "Ipv6Addresses"),
                R.list_param(params, "Ipv6Prefix"))
            if ips:
                await self._call(r.name, "UnassignIpv6Addresses",
                                 R.ipv6_addresses_param(eni.eni_id, ips), headers)
            self._mutate(r, r.mirror.apply_unassign_ipv6, eni.eni_id, ips, prefixes)
            self.audit.add("UnassignIpv6Addresses", eni.eni_id, ips, prefixes, region=r.name)
        return 200, R.unassign_ipv6_xml(eni.eni_id, ips, prefixes)
