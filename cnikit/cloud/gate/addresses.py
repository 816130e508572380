"""Secondary addresses and /28 prefixes on an ENI: AssignPrivateIpAddresses and
UnassignPrivateIpAddresses.

Prefixes live only in the gate (moto ignores them): the upstream is told about addresses
only. A reassignment (AllowReassignment) takes the address from its holder upstream first
and puts it back if the assign then fails.
"""

from __future__ import annotations

from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import Actions, action
from cnikit.cloud.gate.backend import Region, UpstreamError


class AddressActions(Actions):
    @action("AssignPrivateIpAddresses")
    async def _assign(self, r: Region, params, headers) -> tuple[int, bytes]:
        mirror = r.mirror
        async with self._lock:
            eni = await self._eni_with_limits(r, params.get("NetworkInterfaceId"))
            plan = mirror.plan_assign(
                eni.eni_id,
                R.list_param(params, "PrivateIpAddress"),
                R.int_param(params, "SecondaryPrivateIpAddressCount"),
                R.list_param(params, "Ipv4Prefix"),
                R.int_param(params, "Ipv4PrefixCount"),
                R.bool_param(params, "AllowReassignment"),
            )
            for ip, holder in plan.moves.items():
                await self._call(r.name, "UnassignPrivateIpAddresses",
                                 {"NetworkInterfaceId": holder, "PrivateIpAddress.1": ip}, headers)
            if plan.ips:
                try:
                    await self._call(r.name, "AssignPrivateIpAddresses",
                                     R.addresses_param(eni.eni_id, plan.ips), headers)
                except UpstreamError:
                    for ip, holder in plan.moves.items():  # put moved IPs back
                        await self._call(r.name, "AssignPrivateIpAddresses",
                                         {"NetworkInterfaceId": holder, "PrivateIpAddress.1": ip})
                    raise
            self._mutate(r, mirror.apply_assign, plan)
            self.audit.add("AssignPrivateIpAddresses", eni.eni_id, plan.ips, plan.prefixes,
                           region=r.name)
        return 200, R.assign_xml(eni.eni_id, plan.ips, plan.prefixes)

    @action("UnassignPrivateIpAddresses")
    async def _unassign(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            ips = R.list_param(params, "PrivateIpAddress")
            prefixes = R.list_param(params, "Ipv4Prefix")
            eni = r.mirror.plan_unassign(params.get("NetworkInterfaceId"), ips, prefixes)
            if ips:
                await self._call(r.name, "UnassignPrivateIpAddresses",
                                 R.addresses_param(eni.eni_id, ips), headers)
            self._mutate(r, r.mirror.apply_unassign, eni.eni_id, ips, prefixes)
            self.audit.add("UnassignPrivateIpAddresses", eni.eni_id, ips, prefixes,
                           region=r.name)
        return 200, R.return_true_xml("UnassignPrivateIpAddresses")
