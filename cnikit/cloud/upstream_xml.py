"""The upstream's answers (moto, LocalStack) read into the gate's mirror records: subnets,
instances, ENIs and instance types' limits. models.py never sees XML."""

from __future__ import annotations

import hashlib
import ipaddress
import re
import xml.etree.ElementTree as ET

from cnikit.cloud.limits import InstanceLimits
from cnikit.cloud.records import Attachment, Eni, InstanceState, Subnet
from cnikit.cloud.responses import parse_xml
from cnikit.cloud.responses import text as _text

_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")


def valid_mac(raw: str, eni_id: str) -> str:
    """The upstream's MAC, or a stable locally administered one when it is malformed.

    LocalStack 4.14 renders MACs like `02:00:00:25502x:...` (a format bug); the fabric
    and the IMDS need real ones.
    """
    if _MAC.fullmatch(raw.lower()):
        return raw.lower()
    digest = hashlib.sha1(eni_id.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])


def eni_from_item(item: ET.Element, prefixes: tuple[str, ...] = (),
                  ipv6_prefixes: tuple[str, ...] = ()) -> Eni:
    """An upstream ENI as a mirror record. The upstream holds no prefixes (moto ignores
    them): the gate's own, `prefixes` and `ipv6_prefixes`, are carried over."""
    ips = [
        (_text(i, "primary") == "true", _text(i, "privateIpAddress"))
        for i in item.findall("privateIpAddressesSet/item")
    ]
    ordered = [ip for primary, ip in ips if primary] + [ip for primary, ip in ips if not primary]
    if not ordered:
        ordered = [ip for ip in [_text(item, "privateIpAddress")] if ip]
    att = item.find("attachment")
    attachment = None
    if att is not None and _text(att, "instanceId"):
        device = int(_text(att, "deviceIndex", "0"))
        attachment = Attachment(
            attachment_id=_text(att, "attachmentId"),
            instance_id=_text(att, "instanceId"),
            device_index=device,
            # moto says false for the primary ENI; EC2 deletes a launch-created ENI.
            delete_on_termination=_text(att, "deleteOnTermination") == "true" or device == 0,
            status=_text(att, "status", "attached"),
            attach_time=_text(att, "attachTime"),
        )
    seen = {p.findtext("ipv4Prefix") for p in item.findall("ipv4PrefixSet/item")}
    all_prefixes = tuple(prefixes) + tuple(p for p in seen if p and p not in prefixes)
    ipv6s = tuple(str(ipaddress.IPv6Address(a.findtext("ipv6Address")))
                  for a in item.findall("ipv6AddressesSet/item") if a.findtext("ipv6Address"))
    seen6 = [p.findtext("ipv6Prefix") for p in item.findall("ipv6PrefixSet/item")]
    all_ipv6_prefixes = tuple(ipv6_prefixes) + tuple(
        p for p in seen6 if p and p not in ipv6_prefixes)
    return Eni(
        eni_id=_text(item, "networkInterfaceId"),
        subnet_id=_text(item, "subnetId"),
        vpc_id=_text(item, "vpcId"),
        mac=valid_mac(_text(item, "macAddress"), _text(item, "networkInterfaceId")),
        ips=tuple(ordered),
        prefixes=all_prefixes,
        attachment=attachment,
        template=ET.tostring(item),
        ipv6s=ipv6s,
        ipv6_prefixes=all_ipv6_prefixes,
        interface_type=_text(item, "interfaceType") or "interface",
    )


def enis_from_describe(body: bytes) -> list[ET.Element]:
    return parse_xml(body).findall("networkInterfaceSet/item")


def eni_from_created(body: bytes) -> Eni:
    """The ENI in a CreateNetworkInterface answer."""
    item = parse_xml(body).find("networkInterface")
    item.tag = "item"
    return eni_from_item(item)


def subnets_from_describe(body: bytes) -> list[Subnet]:
    return [
        Subnet(
            subnet_id=_text(s, "subnetId"),
            vpc_id=_text(s, "vpcId"),
            cidr=ipaddress.IPv4Network(_text(s, "cidrBlock")) if _text(s, "cidrBlock") else None,
            az=_text(s, "availabilityZone"),
            default_for_az=_text(s, "defaultForAz") == "true",
            ipv6_cidr=_subnet_ipv6(s),
            assign_ipv6_on_creation=_text(s, "assignIpv6AddressOnCreation") == "true",
        )
        for s in parse_xml(body).findall("subnetSet/item")
    ]


def _subnet_ipv6(subnet: ET.Element) -> ipaddress.IPv6Network | None:
    """The subnet's associated IPv6 block. moto 5.2 renders the state as a Python dict's
    repr ("{'State': 'associated'}"), so the state is matched by the word it contains."""
    for assoc in subnet.findall("ipv6CidrBlockAssociationSet/item"):
        state = "".join(assoc.find("ipv6CidrBlockState").itertext()) \
            if assoc.find("ipv6CidrBlockState") is not None else "associated"
        cidr = _text(assoc, "ipv6CidrBlock")
        if cidr and "associated" in state and "disassociated" not in state:
            return ipaddress.IPv6Network(cidr)
    return None


def instances_from(body: bytes) -> list[InstanceState]:
    root = parse_xml(body)
    out = []
    for i in root.iter("item"):
        if i.find("instanceId") is None or i.find("instanceType") is None:
            continue
        out.append(InstanceState(
            instance_id=_text(i, "instanceId"),
            instance_type=_text(i, "instanceType"),
            subnet_id=_text(i, "subnetId"),
            az=_text(i, "placement/availabilityZone"),
            state=_text(i, "instanceState/name", "running"),
        ))
    return out


def limits_from_describe(body: bytes) -> dict[str, InstanceLimits]:
    out = {}
    for it in parse_xml(body).findall("instanceTypeSet/item"):
        net = it.find("networkInfo")
        enis = net.findtext("maximumNetworkInterfaces") if net is not None else None
        ips = net.findtext("ipv4AddressesPerInterface") if net is not None else None
        if not (enis and ips):
            continue
        ipv6 = net.findtext("ipv6AddressesPerInterface")
        if _text(net, "ipv6Supported") == "false":
            ipv6 = "0"
        cards = sorted((int(_text(c, "networkCardIndex", "0")),
                        int(_text(c, "maximumNetworkInterfaces", enis)))
                       for c in net.findall("networkCards/item"))
        out[_text(it, "instanceType")] = InstanceLimits(
            int(enis), int(ips), int(ipv6) if ipv6 else None,
            cards=tuple(most for _, most in cards),
            efa=int(_text(net, "efaInfo/maximumEfaInterfaces", "0")),
            encryption_in_transit=_text(net, "encryptionInTransitSupported") == "true")
    return out
