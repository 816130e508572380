"""DescribeNetworkInterfaces' filters on the gate's ENI records: the values each filter
name matches against, read from the record (what the gate models) or from the upstream's
item (what it does not), and the names EC2 knows."""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET

from cnikit.cloud.errors import invalid_value
from cnikit.cloud.query import matches
from cnikit.cloud.records import Eni
from cnikit.cloud.responses import text as _text


@functools.lru_cache(maxsize=8192)
def _static_fields(template: bytes) -> dict[str, list[str]]:
    """Filterable fields the gate does not model, read once from the upstream's item."""
    if not template:
        return {}
    item = ET.fromstring(template)
    out: dict[str, list[str]] = {
        "availability-zone": [_text(item, "availabilityZone")],
        "description": [_text(item, "description")],
        "owner-id": [_text(item, "ownerId")],
        "requester-id": [_text(item, "requesterId")],
        "requester-managed": [_text(item, "requesterManaged")],
        "source-dest-check": [_text(item, "sourceDestCheck")],
        "group-id": [_text(g, "groupId") for g in item.findall("groupSet/item")],
        "group-name": [_text(g, "groupName") for g in item.findall("groupSet/item")],
        "tag-key": [],
    }
    for tag in item.findall("tagSet/item"):
        key = _text(tag, "key")
        out["tag-key"].append(key)
        out.setdefault(f"tag:{key}", []).append(_text(tag, "value"))
    return out


def eni_field(eni: Eni, name: str) -> list[str] | None:
    """The values a filter named `name` matches against, or None when EC2 knows no such filter."""
    att = eni.attachment
    dynamic = {
        "network-interface-id": [eni.eni_id],
        "subnet-id": [eni.subnet_id],
        "vpc-id": [eni.vpc_id],
        "mac-address": [eni.mac],
        "status": ["in-use" if att else "available"],
        "private-ip-address": list(eni.ips),
        "addresses.private-ip-address": list(eni.ips),
        "addresses.primary": ["true"],
        "ipv4-prefix": list(eni.prefixes),
        "ipv6-addresses.ipv6-address": list(eni.ipv6s),
        "interface-type": [eni.interface_type],
        "attachment.instance-id": [att.instance_id] if att else [],
        "attachment.attachment-id": [att.attachment_id] if att else [],
        "attachment.device-index": [str(att.device_index)] if att else [],
        "attachment.status": [att.status] if att else [],
        "attachment.delete-on-termination": (
            ["true" if att.delete_on_termination else "false"] if att else []),
        "attachment.instance-owner-id": ["123456789012"] if att else [],
    }
    if name in dynamic:
        return dynamic[name]
    static = _static_fields(eni.template)
    if name in static:
        return static[name]
    if name.startswith("tag:"):
        return []
    return None


DESCRIBE_ENI_FILTERS = frozenset({
    "network-interface-id", "subnet-id", "vpc-id", "mac-address", "status", "private-ip-address",
    "addresses.private-ip-address", "addresses.primary", "ipv4-prefix",
    "ipv6-addresses.ipv6-address", "attachment.instance-id",
    "attachment.attachment-id", "attachment.device-index", "attachment.status",
    "attachment.delete-on-termination", "attachment.instance-owner-id", "availability-zone",
    "description", "owner-id", "requester-id", "requester-managed", "source-dest-check",
    "interface-type", "group-id", "group-name", "tag-key",
})


def check_filter_name(name: str) -> None:
    if name not in DESCRIBE_ENI_FILTERS and not name.startswith("tag:"):
        raise invalid_value(f"The filter '{name}' is invalid")


def match_filters(eni: Eni, wanted: dict[str, list[str]]) -> bool:
    return matches(lambda name: eni_field(eni, name), wanted)
