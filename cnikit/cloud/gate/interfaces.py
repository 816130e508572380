"""ENIs: CreateNetworkInterface, DeleteNetworkInterface, AttachNetworkInterface,
DetachNetworkInterface and DescribeNetworkInterfaces.

The gate picks a new ENI's addresses (the upstream is given them, so it never chooses);
Describe is answered from the mirror, rendered from the upstream's own XML for each ENI
with the gate's addresses, prefixes and attachment, as of the Describe lag's age (and its
address lists as of the address lag's, faults/addresses_lag.py).
"""

from __future__ import annotations

from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import Actions, action
from cnikit.cloud.gate.backend import Region, UpstreamError
from cnikit.cloud.models import select_enis
from cnikit.cloud.records import Eni
from faultcore.caller import spared as _spared


class InterfaceActions(Actions):
    @action("CreateNetworkInterface")
    async def _create_eni(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            primary, secondaries = R.new_eni_addresses(params)
            subnet, ips, prefixes = r.mirror.plan_new_eni(
                params.get("SubnetId"), primary, secondaries,
                R.int_param(params, "SecondaryPrivateIpAddressCount"),
                R.list_param(params, "Ipv4Prefix", "Ipv4Prefix"),
                R.int_param(params, "Ipv4PrefixCount"),
            )
            fwd = {k: v for k, v in params.items()
                   if not k.startswith(("PrivateIpAddresses.", "Ipv4Prefix"))
                   and k not in ("SecondaryPrivateIpAddressCount", "PrivateIpAddress")}
            fwd["PrivateIpAddress"] = ips[0]
            body = await self._call(r.name, "CreateNetworkInterface", fwd, headers)
            eni = R.eni_from_created(body)
            if len(ips) > 1:
                try:
                    await self._call(r.name, "AssignPrivateIpAddresses",
                                     R.addresses_param(eni.eni_id, ips[1:]), headers)
                except UpstreamError:  # all or nothing, as EC2: take the new ENI back
                    await self._call(r.name, "DeleteNetworkInterface",
                                     {"NetworkInterfaceId": eni.eni_id})
                    raise
            eni = Eni(eni.eni_id, subnet.subnet_id, subnet.vpc_id, eni.mac, tuple(ips),
                      tuple(prefixes), None, eni.template)
            self._mutate(r, r.mirror.apply_new_eni, eni)
            self.audit.add("CreateNetworkInterface", eni.eni_id, ips, prefixes, region=r.name)
        return 200, R.created_eni_xml(eni)

    @action("DeleteNetworkInterface")
    async def _delete_eni(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            eni = r.mirror.plan_delete(params.get("NetworkInterfaceId"))
            status, out = await self._forward(r.name, params, headers)
            if status >= 300:
                raise UpstreamError(status, out)
            self._mutate(r, r.mirror.apply_delete, eni.eni_id)
            self.audit.add("DeleteNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           region=r.name)
        return status, out

    @action("AttachNetworkInterface")
    async def _attach(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            inst = r.mirror.instance(params.get("InstanceId"))
            await self._ensure_limits(inst.instance_type)
            device = R.int_param(params, "DeviceIndex")
            eni, inst = r.mirror.plan_attach(params.get("NetworkInterfaceId"),
                                             inst.instance_id, device)
            status, out = await self._forward(r.name, params, headers)
            if status >= 300:
                raise UpstreamError(status, out)
            att = R.attachment_from(out, inst.instance_id, device)
            settle = 0.0 if _spared(headers) else self.faults.transition_s(
                "AttachNetworkInterface", r.name)
            if settle > 0:
                self.backend.transitions.begin(r, eni.eni_id, att, "attaching", settle)
            else:
                self._mutate(r, r.mirror.set_attachment, eni.eni_id, att)
            self.audit.add("AttachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           instance_id=inst.instance_id, region=r.name)
        return status, out

    @action("DetachNetworkInterface")
    async def _detach(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            eni = r.mirror.plan_detach(params.get("AttachmentId"))
            if eni.attachment.status == "detaching":
                # Already on its way out (the upstream detached it): EC2 answers as done.
                return 200, R.return_true_xml("DetachNetworkInterface")
            status, out = await self._forward(r.name, params, headers)
            if status >= 300:
                raise UpstreamError(status, out)
            settle = 0.0 if _spared(headers) else self.faults.transition_s(
                "DetachNetworkInterface", r.name)
            if settle > 0:
                self.backend.transitions.begin(r, eni.eni_id, eni.attachment, "detaching",
                                               settle)
            else:
                self._mutate(r, r.mirror.set_attachment, eni.eni_id, None)
            self.audit.add("DetachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           instance_id=eni.attachment.instance_id, region=r.name)
        return status, out

    @action("DescribeNetworkInterfaces")
    async def _describe_enis(self, r: Region, params, headers) -> tuple[int, bytes]:
        view = None if _spared(headers) else self.faults.describe_view(r.name)
        enis = self._enis_as_of(r, view.lag if view else 0.0)
        if view and view.addresses:  # addresses_lag: address lists behind the attachments
            enis = self._addresses_as_of(r, enis, view.addresses)
        wanted = R.filters(params)
        for name in wanted:
            R.check_filter_name(name)
        selected = select_enis(enis, R.list_param(params, "NetworkInterfaceId"))
        selected = [e for e in selected if R.match_filters(e, wanted)]
        page, next_token = R.page(selected, params)
        return 200, R.describe_enis_xml(page, next_token)
