"""IPv6 addresses and /80 prefixes on an ENI: AssignIpv6Addresses and UnassignIpv6Addresses.

moto keeps the IPv6 addresses it is given but picks its own for a count (at random, so two
ENIs can draw the same one) and ignores prefixes: the gate picks every address and tells the
upstream only explicit ones; /80 prefixes live in the gate alone, as /28s do.
"""

from __future__ import annotations

from cnikit.cloud import query as Q
from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region


def assign_ipv6_xml(eni_id: str, addresses: list[str], prefixes: list[str]) -> bytes:
    return R.action_xml(
        "AssignIpv6Addresses",
        R.plain_items("assignedIpv6Addresses", addresses)
        + R.plain_items("assignedIpv6PrefixSet", prefixes)
        + f"<networkInterfaceId>{eni_id}</networkInterfaceId>",
    )


def unassign_ipv6_xml(eni_id: str, addresses: list[str], prefixes: list[str]) -> bytes:
    return R.action_xml(
        "UnassignIpv6Addresses",
        f"<networkInterfaceId>{eni_id}</networkInterfaceId>"
        + R.plain_items("unassignedIpv6Addresses", addresses)
        + R.plain_items("unassignedIpv6PrefixSet", prefixes),
    )


class Ipv6Actions(ActionGroup):
    @action("AssignIpv6Addresses")
    async def _assign_ipv6(self, r: Region, params, headers) -> tuple[int, bytes]:
        b, mirror = self.backend, r.mirror
        async with b.lock:
            eni = await b.eni_with_limits(r, params.get("NetworkInterfaceId"))
            plan = mirror.plan_assign_ipv6(
                eni.eni_id,
                Q.list_param(params, "Ipv6Addresses"),
                Q.int_param(params, "Ipv6AddressCount"),
                Q.list_param(params, "Ipv6Prefix"),
                Q.int_param(params, "Ipv6PrefixCount"),
            )
            if plan.ips:
                await b.call(r.name, "AssignIpv6Addresses",
                             Q.ipv6_addresses_param(eni.eni_id, plan.ips), headers)
            b.mutate(r, mirror.apply_assign_ipv6, plan)
            b.audit.add("AssignIpv6Addresses", eni.eni_id, plan.ips, plan.prefixes,
                        region=r.name)
        return 200, assign_ipv6_xml(eni.eni_id, plan.ips, plan.prefixes)

    @action("UnassignIpv6Addresses")
    async def _unassign_ipv6(self, r: Region, params, headers) -> tuple[int, bytes]:
        b = self.backend
        async with b.lock:
            eni, ips, prefixes = r.mirror.plan_unassign_ipv6(
                params.get("NetworkInterfaceId"), Q.list_param(params, "Ipv6Addresses"),
                Q.list_param(params, "Ipv6Prefix"))
            if ips:
                await b.call(r.name, "UnassignIpv6Addresses",
                             Q.ipv6_addresses_param(eni.eni_id, ips), headers)
            b.mutate(r, r.mirror.apply_unassign_ipv6, eni.eni_id, ips, prefixes)
            b.audit.add("UnassignIpv6Addresses", eni.eni_id, ips, prefixes, region=r.name)
        return 200, unassign_ipv6_xml(eni.eni_id, ips, prefixes)
