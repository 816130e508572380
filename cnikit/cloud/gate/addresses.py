"""Secondary addresses and /28 prefixes on an ENI: AssignPrivateIpAddresses and
UnassignPrivateIpAddresses.

Prefixes live only in the gate (moto ignores them): the upstream is told about addresses
only. A reassignment (AllowReassignment) takes the address from its holder upstream first
and puts it back if the assign then fails.
"""

from __future__ import annotations

from cnikit.cloud import query as Q
from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region, UpstreamError


def assign_xml(eni_id: str, ips: list[str], prefixes: list[str]) -> bytes:
    return R.action_xml(
        "AssignPrivateIpAddresses",
        f"<networkInterfaceId>{eni_id}</networkInterfaceId>"
        + R.items("assignedPrivateIpAddressesSet", "privateIpAddress", ips)
        + R.items("assignedIpv4PrefixSet", "ipv4Prefix", prefixes),
    )


class AddressActions(ActionGroup):
    @action("AssignPrivateIpAddresses")
    async def _assign(self, r: Region, params, headers) -> tuple[int, bytes]:
        b, mirror = self.backend, r.mirror
        async with b.lock:
            eni = await b.eni_with_limits(r, params.get("NetworkInterfaceId"))
            plan = mirror.plan_assign(
                eni.eni_id,
                Q.list_param(params, "PrivateIpAddress"),
                Q.int_param(params, "SecondaryPrivateIpAddressCount"),
                Q.list_param(params, "Ipv4Prefix"),
                Q.int_param(params, "Ipv4PrefixCount"),
                Q.bool_param(params, "AllowReassignment"),
            )
            for ip, holder in plan.moves.items():
                await b.call(r.name, "UnassignPrivateIpAddresses",
                             {"NetworkInterfaceId": holder, "PrivateIpAddress.1": ip}, headers)
            if plan.ips:
                try:
                    await b.call(r.name, "AssignPrivateIpAddresses",
                                 Q.addresses_param(eni.eni_id, plan.ips), headers)
                except UpstreamError:
                    for ip, holder in plan.moves.items():  # put moved IPs back
                        await b.call(r.name, "AssignPrivateIpAddresses",
                                     {"NetworkInterfaceId": holder, "PrivateIpAddress.1": ip})
                    raise
            b.mutate(r, mirror.apply_assign, plan)
            b.audit.add("AssignPrivateIpAddresses", eni.eni_id, plan.ips, plan.prefixes,
                        region=r.name)
        return 200, assign_xml(eni.eni_id, plan.ips, plan.prefixes)

    @action("UnassignPrivateIpAddresses")
    async def _unassign(self, r: Region, params, headers) -> tuple[int, bytes]:
        b = self.backend
        async with b.lock:
            ips = Q.list_param(params, "PrivateIpAddress")
            prefixes = Q.list_param(params, "Ipv4Prefix")
            eni = r.mirror.plan_unassign(params.get("NetworkInterfaceId"), ips, prefixes)
            if ips:
                await b.call(r.name, "UnassignPrivateIpAddresses",
                             Q.addresses_param(eni.eni_id, ips), headers)
            b.mutate(r, r.mirror.apply_unassign, eni.eni_id, ips, prefixes)
            b.audit.add("UnassignPrivateIpAddresses", eni.eni_id, ips, prefixes,
                        region=r.name)
        return 200, R.return_true_xml("UnassignPrivateIpAddresses")
