"""ENIs: CreateNetworkInterface, DeleteNetworkInterface, AttachNetworkInterface,
DetachNetworkInterface and DescribeNetworkInterfaces.

The gate picks a new ENI's addresses (the upstream is given them, so it never chooses);
an ENI's type (InterfaceType: trunk) is the gate's too (cnikit/cloud/trunks.py);
Describe is answered from the mirror, rendered from the upstream's own XML for each ENI
with the gate's addresses, prefixes and attachment, as of the Describe lag's age (and its
address lists as of the address lag's, faults/addresses_lag.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

from cnikit.cloud import eni_filters, trunks
from cnikit.cloud import query as Q
from cnikit.cloud import responses as R
from cnikit.cloud import upstream_xml as U
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region, UpstreamError
from cnikit.cloud.gate.eni_item import render_eni
from cnikit.cloud.limits import UNATTACHED
from cnikit.cloud.models import AssignPlan, Mirror, select_enis
from cnikit.cloud.records import Attachment, Eni, Subnet
from faultcore.caller import spared as _spared


def plan_new_ipv6(mirror: Mirror, subnet: Subnet, params: dict[str, str], prefix: str = "",
                  listed: str = "Ipv6Addresses", eni: Eni | None = None) -> AssignPlan:
    """The IPv6 addresses and /80s of a new ENI (CreateNetworkInterface; RunInstances'
    with `prefix` "NetworkInterface.1.", or `listed` "Ipv6Address" at its top level): those
    asked for, else one address when the subnet has AssignIpv6AddressOnCreation, as EC2
    gives. `eni`: the ENI already made (RunInstances' primary), else a blank one."""
    addresses = Q.list_param(params, prefix + listed, "Ipv6Address")
    count = Q.int_param(params, prefix + "Ipv6AddressCount")
    prefixes = Q.list_param(params, prefix + "Ipv6Prefix", "Ipv6Prefix")
    prefix_count = Q.int_param(params, prefix + "Ipv6PrefixCount")
    if not (addresses or count or prefixes or prefix_count):
        # An IPv6-only subnet always gives a new interface its address (EC2 requires
        # AssignIpv6AddressOnCreation there).
        if not subnet.assign_ipv6_on_creation and subnet.cidr is not None:
            return AssignPlan("")
        count = 1
    eni = eni or Eni("", subnet.subnet_id, subnet.vpc_id, "", ())
    limit = mirror.eni_limits(eni).ipv6_per_eni if eni.attachment else UNATTACHED.ipv6_per_eni
    return mirror.plan_ipv6(eni, subnet, addresses, count, prefixes, prefix_count, limit)


def new_eni_addresses(params: dict[str, str]) -> tuple[str | None, list[str]]:
    """CreateNetworkInterface's requested primary (PrivateIpAddress, or the
    PrivateIpAddresses.N entry marked Primary) and secondary addresses."""
    listed = list(zip(Q.list_param(params, "PrivateIpAddresses", "PrivateIpAddress"),
                      Q.list_param(params, "PrivateIpAddresses", "Primary"), strict=False))
    secondaries = [ip for ip, primary in listed if primary.lower() != "true"]
    primary = params.get("PrivateIpAddress") or next(
        (ip for ip, p in listed if p.lower() == "true"), None)
    return primary, secondaries


def attachment_from(body: bytes, instance_id: str, device_index: int,
                    card: int = 0) -> Attachment:
    """The attachment an AttachNetworkInterface answer names, made now."""
    return Attachment(attachment_id=R.parse_xml(body).findtext("attachmentId") or "",
                      instance_id=instance_id, device_index=device_index,
                      delete_on_termination=False, network_card_index=card,
                      attach_time=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"))


def created_eni_xml(eni: Eni) -> bytes:
    inner = render_eni(eni).decode()
    inner = "<networkInterface>" + inner[len("<item>"):-len("</item>")] + "</networkInterface>"
    return R.action_xml("CreateNetworkInterface", inner)


def describe_enis_xml(enis: list[Eni], next_token: str | None) -> bytes:
    token = f"<nextToken>{next_token}</nextToken>" if next_token else ""
    body = b"".join(render_eni(e) for e in enis)
    head = (f'<DescribeNetworkInterfacesResponse xmlns="{R.NS}">'
            f"<requestId>{R.request_id()}</requestId>")
    return (R.XML_DECL + head.encode() + b"<networkInterfaceSet>" + body
            + b"</networkInterfaceSet>" + token.encode() + b"</DescribeNetworkInterfacesResponse>")


class InterfaceActions(ActionGroup):
    @action("CreateNetworkInterface")
    async def _create_eni(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self.backend.lock:
            kind = trunks.check_new_type(params.get("InterfaceType"), self.backend.trunking)
            primary, secondaries = new_eni_addresses(params)
            subnet, ips, prefixes = r.mirror.plan_new_eni(
                params.get("SubnetId"), primary, secondaries,
                Q.int_param(params, "SecondaryPrivateIpAddressCount"),
                Q.list_param(params, "Ipv4Prefix", "Ipv4Prefix"),
                Q.int_param(params, "Ipv4PrefixCount"),
            )
            v6 = plan_new_ipv6(r.mirror, subnet, params)
            fwd = {k: v for k, v in params.items()
                   if not k.startswith(("PrivateIpAddresses.", "Ipv4Prefix", "Ipv6"))
                   and k not in ("SecondaryPrivateIpAddressCount", "PrivateIpAddress",
                                 "InterfaceType")}
            if ips:  # moto picks one of its own in an IPv6-only subnet: never shown
                fwd["PrivateIpAddress"] = ips[0]
            body = await self.backend.call(r.name, "CreateNetworkInterface", fwd, headers)
            eni = U.eni_from_created(body)
            more = []
            if len(ips) > 1:
                more.append(("AssignPrivateIpAddresses", Q.addresses_param(eni.eni_id, ips[1:])))
            if v6.ips:
                more.append(("AssignIpv6Addresses", Q.ipv6_addresses_param(eni.eni_id, v6.ips)))
            for call, args in more:
                try:
                    await self.backend.call(r.name, call, args, headers)
                except UpstreamError:  # all or nothing, as EC2: take the new ENI back
                    await self.backend.call(r.name, "DeleteNetworkInterface",
                                            {"NetworkInterfaceId": eni.eni_id})
                    raise
            eni = Eni(eni.eni_id, subnet.subnet_id, subnet.vpc_id, eni.mac, tuple(ips),
                      tuple(prefixes), None, eni.template, tuple(v6.ips), tuple(v6.prefixes),
                      kind)
            self.backend.mutate(r, r.mirror.apply_new_eni, eni)
            self.backend.audit.add("CreateNetworkInterface", eni.eni_id, ips + v6.ips,
                                   prefixes + v6.prefixes, region=r.name)
        return 200, created_eni_xml(eni)

    @action("DeleteNetworkInterface")
    async def _delete_eni(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self.backend.lock:
            eni = r.mirror.plan_delete(params.get("NetworkInterfaceId"))
            status, out = await self.backend.pass_through(r.name, params, headers)
            self.backend.mutate(r, r.mirror.apply_delete, eni.eni_id)
            self.backend.audit.add("DeleteNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                                   region=r.name)
        return status, out

    @action("AttachNetworkInterface")
    async def _attach(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self.backend.lock:
            inst = r.mirror.instance(params.get("InstanceId"))
            await self.backend.ensure_limits(inst.instance_type)
            device = Q.int_param(params, "DeviceIndex")
            card = Q.int_param(params, "NetworkCardIndex") or 0
            eni, inst = r.mirror.plan_attach(params.get("NetworkInterfaceId"),
                                             inst.instance_id, device, card)
            status, out = await self.backend.pass_through(r.name, params, headers)
            att = attachment_from(out, inst.instance_id, device, card)
            settle = 0.0 if _spared(headers) else self.backend.faults.transition_s(
                "AttachNetworkInterface", r.name)
            if settle > 0:
                self.backend.transitions.begin(r, eni.eni_id, att, "attaching", settle)
            else:
                self.backend.mutate(r, r.mirror.set_attachment, eni.eni_id, att)
            self.backend.audit.add("AttachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                                   instance_id=inst.instance_id, region=r.name)
        return status, out

    @action("DetachNetworkInterface")
    async def _detach(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self.backend.lock:
            eni = r.mirror.plan_detach(params.get("AttachmentId"))
            if eni.attachment.status == "detaching":
                # Already on its way out (the upstream detached it): EC2 answers as done.
                return 200, R.return_true_xml("DetachNetworkInterface")
            status, out = await self.backend.pass_through(r.name, params, headers)
            settle = 0.0 if _spared(headers) else self.backend.faults.transition_s(
                "DetachNetworkInterface", r.name)
            if settle > 0:
                self.backend.transitions.begin(r, eni.eni_id, eni.attachment, "detaching",
                                               settle)
            else:
                self.backend.mutate(r, r.mirror.set_attachment, eni.eni_id, None)
            self.backend.audit.add("DetachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                                   instance_id=eni.attachment.instance_id, region=r.name)
        return status, out

    @action("DescribeNetworkInterfaces")
    async def _describe_enis(self, r: Region, params, headers) -> tuple[int, bytes]:
        view = None if _spared(headers) else self.backend.faults.describe_view(r.name)
        enis = self.backend.enis_as_of(r, view.lag if view else 0.0)
        if view and view.addresses:  # addresses-lag: address lists behind the attachments
            enis = self.backend.addresses_as_of(r, enis, view.addresses)
        wanted = Q.filters(params)
        for name in wanted:
            eni_filters.check_filter_name(name)
        selected = select_enis(enis, Q.list_param(params, "NetworkInterfaceId"))
        selected = [e for e in selected if eni_filters.match_filters(e, wanted)]
        page, next_token = Q.page(selected, params)
        return 200, describe_enis_xml(page, next_token)
