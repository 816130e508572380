"""An ENI of the gate's mirror as EC2's `<item>`: the upstream's own item for it (its
template) with the gate's truth for addresses, prefixes, attachment and type. Create's and
Describe's answers (interfaces.py) are made of it."""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET

from cnikit.cloud.records import Eni
from cnikit.cloud.responses import text


def _set(parent: ET.Element, tag: str, value: str) -> ET.Element:
    el = ET.SubElement(parent, tag)
    el.text = value
    return el


@functools.lru_cache(maxsize=8192)
def render_eni(eni: Eni) -> bytes:
    """The upstream's <item> for this ENI with the gate's truth for addresses, attachment
    and interface type."""
    item = ET.fromstring(eni.template) if eni.template else ET.Element("item")
    for tag in ("privateIpAddress", "privateIpAddressesSet", "ipv4PrefixSet", "attachment",
                "status", "networkInterfaceId", "subnetId", "vpcId", "macAddress",
                "ipv6AddressesSet", "ipv6PrefixSet", "ipv6Address", "ipv6Native"):
        for el in item.findall(tag):
            item.remove(el)
    _set(item, "networkInterfaceId", eni.eni_id)
    _set(item, "subnetId", eni.subnet_id)
    _set(item, "vpcId", eni.vpc_id)
    _set(item, "macAddress", eni.mac)
    if eni.primary_ip:  # an ENI of an IPv6-only subnet has none
        _set(item, "privateIpAddress", eni.primary_ip)
    _set(item, "ipv6Native", "false" if eni.ips else "true")
    ips = ET.SubElement(item, "privateIpAddressesSet")
    for n, ip in enumerate(eni.ips):
        it = ET.SubElement(ips, "item")
        _set(it, "primary", "true" if n == 0 else "false")
        _set(it, "privateIpAddress", ip)
    if eni.prefixes:
        pset = ET.SubElement(item, "ipv4PrefixSet")
        for p in eni.prefixes:
            _set(ET.SubElement(pset, "item"), "ipv4Prefix", p)
    v6 = ET.SubElement(item, "ipv6AddressesSet")
    for a in eni.ipv6s:
        it = ET.SubElement(v6, "item")
        _set(it, "ipv6Address", a)
        _set(it, "isPrimaryIpv6", "false")
    if eni.ipv6_prefixes:
        pset = ET.SubElement(item, "ipv6PrefixSet")
        for p in eni.ipv6_prefixes:
            _set(ET.SubElement(pset, "item"), "ipv6Prefix", p)
    att = eni.attachment
    if att is not None:
        a = ET.SubElement(item, "attachment")
        _set(a, "attachTime", att.attach_time)
        _set(a, "attachmentId", att.attachment_id)
        _set(a, "deleteOnTermination", "true" if att.delete_on_termination else "false")
        _set(a, "deviceIndex", str(att.device_index))
        _set(a, "networkCardIndex", str(att.network_card_index))
        _set(a, "instanceId", att.instance_id)
        _set(a, "instanceOwnerId", text(item, "ownerId", "123456789012"))
        _set(a, "status", att.status)
    _set(item, "status", "in-use" if att is not None else "available")
    _set_type(item, eni.interface_type)
    return ET.tostring(item)


def _set_type(item: ET.Element, interface_type: str) -> None:
    """The gate's type (the upstream shows every ENI as "interface"), in the upstream's own
    place for it, so an ENI of the type the upstream said renders as it always did."""
    el = item.find("interfaceType")
    if el is None:
        if interface_type != "interface":
            _set(item, "interfaceType", interface_type)
    elif el.text != interface_type:
        el.text = interface_type
