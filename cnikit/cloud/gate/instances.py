"""Instances: RunInstances and TerminateInstances.

The gate launches one instance per upstream call, each with the primary address (and
secondaries) it picked, and adopts each into the mirror with the ENIs the upstream made for
it. On termination it does to the instance's ENIs what EC2 does: detach, and delete those
marked delete-on-termination.
"""

from __future__ import annotations

import logging

from cnikit.cloud import query as Q
from cnikit.cloud import responses as R
from cnikit.cloud import upstream_xml as U
from cnikit.cloud.errors import invalid_value
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region, UpstreamError
from cnikit.cloud.gate.interfaces import plan_new_ipv6
from cnikit.cloud.models import check_launch_count
from cnikit.cloud.records import Eni, InstanceState

log = logging.getLogger("cnikit.cloud.gate")

NIC = "NetworkInterface.1."  # RunInstances' first network interface, as a parameter prefix


def merge_reservations(bodies: list[bytes]) -> bytes:
    """One RunInstances answer from several single-instance ones (the gate launches one at
    a time)."""
    if len(bodies) == 1:
        return bodies[0]
    first = R.parse_xml(bodies[0])
    target = first.find("instancesSet")
    for body in bodies[1:]:
        for item in R.parse_xml(body).findall("instancesSet/item"):
            target.append(item)
    return R.document(first)


class InstanceActions(ActionGroup):
    @action("RunInstances")
    async def _run_instances(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self.backend.lock:
            itype = params.get("InstanceType") or "m1.small"
            limits = await self.backend.ensure_limits(itype)
            if limits is None:
                raise invalid_value(f"Invalid value '{itype}' for InstanceType.")
            count = Q.int_param(params, "MaxCount") or 1
            min_count = Q.int_param(params, "MinCount") or 1
            check_launch_count(min_count, count)
            if params.get(NIC + "NetworkInterfaceId"):  # launched on an existing ENI
                status, out = await self.backend.pass_through(r.name, params, headers)
                await self.backend.resync_region(r)
                return status, out
            subnet, plans = r.mirror.plan_launch(
                params.get("SubnetId") or params.get(NIC + "SubnetId"),
                params.get("Placement.AvailabilityZone"),
                params.get("PrivateIpAddress") or params.get(NIC + "PrivateIpAddress"),
                Q.int_param(params, NIC + "SecondaryPrivateIpAddressCount") or 0,
                count, limits)
            uses_nic = any(k.startswith(NIC) for k in params)
            v6 = self._ipv6_asked(r, subnet, params, uses_nic, count)
            bodies = []
            for ips in plans:
                fwd = {k: v for k, v in params.items()
                       if k not in ("MinCount", "MaxCount", "PrivateIpAddress",
                                    NIC + "PrivateIpAddress", NIC + "SecondaryPrivateIpAddressCount")
                       and not k.startswith(("Ipv6", NIC + "Ipv6"))}
                fwd.update({"MinCount": "1", "MaxCount": "1"})
                fwd[(NIC if uses_nic else "") + "PrivateIpAddress"] = ips[0]
                if not uses_nic:
                    fwd["SubnetId"] = subnet.subnet_id
                try:
                    bodies.append(await self.backend.call(r.name, "RunInstances", fwd, headers))
                except UpstreamError:
                    if len(bodies) >= min_count:
                        break
                    raise
                await self._adopt_instances(r, U.instances_from(bodies[-1]), ips[1:], headers)
                if v6:
                    await self._give_ipv6(r, U.instances_from(bodies[-1]), subnet, params,
                                          uses_nic, headers)
        return 200, merge_reservations(bodies)

    @staticmethod
    def _ipv6_asked(r: Region, subnet, params, uses_nic: bool, count: int) -> bool:
        """Whether the launch's primary ENIs get IPv6 (refused here, before anything is
        launched, when EC2 would refuse it)."""
        plan = plan_new_ipv6(r.mirror, subnet, params, NIC if uses_nic else "",
                             "Ipv6Addresses" if uses_nic else "Ipv6Address")
        if plan.ips and count > 1 and any(".Ipv6Address" in k for k in params):
            raise invalid_value("IPv6 addresses can only be given for one instance")
        return bool(plan.ips or plan.prefixes)

    async def _give_ipv6(self, r: Region, instances: list[InstanceState], subnet, params,
                         uses_nic: bool, headers) -> None:
        """The IPv6 addresses of each new instance's primary ENI, picked now that the
        instances before it hold theirs."""
        for inst in instances:
            eni = next((e for e in r.mirror.instance_enis(inst.instance_id)
                        if e.attachment.device_index == 0), None)
            if eni is None:
                continue
            plan = plan_new_ipv6(r.mirror, subnet, params, NIC if uses_nic else "",
                                 "Ipv6Addresses" if uses_nic else "Ipv6Address", eni)
            plan.eni_id = eni.eni_id
            if plan.ips:
                await self.backend.call(r.name, "AssignIpv6Addresses",
                                        Q.ipv6_addresses_param(eni.eni_id, plan.ips), headers)
            self.backend.mutate(r, r.mirror.apply_assign_ipv6, plan)
            self.backend.audit.add("RunInstances", eni.eni_id, plan.ips, plan.prefixes,
                                   instance_id=inst.instance_id, region=r.name)

    async def _adopt_instances(self, r: Region, instances: list[InstanceState],
                               secondaries: list[str], headers) -> None:
        for inst in instances:
            body = await self.backend.call(r.name, "DescribeNetworkInterfaces", {
                "Filter.1.Name": "attachment.instance-id", "Filter.1.Value.1": inst.instance_id})
            enis = [U.eni_from_item(it) for it in U.enis_from_describe(body)]
            primary = next((e for e in enis if e.attachment and e.attachment.device_index == 0),
                           None)
            if primary is not None and secondaries:
                await self.backend.call(r.name, "AssignPrivateIpAddresses",
                                        Q.addresses_param(primary.eni_id, secondaries), headers)
                enis = [e if e is not primary else Eni(
                    e.eni_id, e.subnet_id, e.vpc_id, e.mac, e.ips + tuple(secondaries),
                    e.prefixes, e.attachment, e.template) for e in enis]
            self.backend.mutate(r, r.mirror.apply_launch, inst, enis)
            for e in enis:
                self.backend.audit.add("RunInstances", e.eni_id, e.ips, e.prefixes,
                                       instance_id=inst.instance_id, region=r.name)

    @action("TerminateInstances")
    async def _terminate(self, r: Region, params, headers) -> tuple[int, bytes]:
        mirror = r.mirror
        async with self.backend.lock:
            ids = Q.list_param(params, "InstanceId")
            for i in ids:
                mirror.instance(i)
            status, out = await self.backend.pass_through(r.name, params, headers)
            for iid in ids:
                for eni in mirror.instance_enis(iid):
                    await self._release_eni(r, eni)
                self.backend.mutate(r, mirror.mark_terminated, iid)
                self.backend.audit.add("TerminateInstances", None, instance_id=iid, region=r.name)
        return status, out

    async def _release_eni(self, r: Region, eni: Eni) -> None:
        """What EC2 does to an instance's ENIs on termination: detach, delete if DOT.

        The primary ENI is deleted without a detach upstream: moto's DescribeInstances
        crashes on an instance without device 0.
        """
        if eni.attachment.device_index != 0:
            try:
                await self.backend.call(r.name, "DetachNetworkInterface", {
                    "AttachmentId": eni.attachment.attachment_id, "Force": "true"})
            except UpstreamError as e:
                log.warning("detach %s on termination: %s", eni.eni_id, e.code())
        if eni.attachment.delete_on_termination:
            try:
                await self.backend.call(r.name, "DeleteNetworkInterface",
                                        {"NetworkInterfaceId": eni.eni_id})
            except UpstreamError as e:
                log.warning("delete %s on termination: %s", eni.eni_id, e.code())
            self.backend.mutate(r, r.mirror.apply_delete, eni.eni_id)
            self.backend.audit.add("DeleteNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                                   instance_id=eni.attachment.instance_id, region=r.name)
        else:
            self.backend.mutate(r, r.mirror.set_attachment, eni.eni_id, None)
            self.backend.audit.add("DetachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                                   instance_id=eni.attachment.instance_id, region=r.name)
