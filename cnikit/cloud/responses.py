"""EC2 Query protocol wire format: request parameters in, XML out.

Requests are form-encoded `Action=...&Version=...` with lists as `Name.N` and structures
as `Name.N.Member`. Responses are XML in EC2's namespace; errors are
`<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>`.
Parsing upstream XML into mirror records and rendering mirror records as XML both live
here, so models.py never sees XML.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import ipaddress
import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from cnikit.cloud.errors import Ec2Error, invalid_value
from cnikit.cloud.limits import InstanceLimits
from cnikit.cloud.records import Attachment, Eni, InstanceState, Subnet

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
XML_DECL = b'<?xml version="1.0" encoding="UTF-8"?>\n'


# -- requests -----------------------------------------------------------------------------

def parse_params(body: bytes, query: str = "") -> dict[str, str]:
    params = dict(parse_qsl(query, keep_blank_values=True))
    if body:
        try:
            params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise Ec2Error("MalformedQueryString", "The request body is not UTF-8") from None
    return params


_INDEX = re.compile(r"\.(\d+)(?:\.|$)")


# SigV4: "AWS4-HMAC-SHA256 Credential=AKID/20261130/us-west-2/ec2/aws4_request, ..."
_SCOPE = re.compile(r"Credential=[^/,\s]*/\d{8}/([^/,\s]+)/")


def signed_region(headers, params: dict[str, str]) -> str | None:
    """The region a request is signed for (its SigV4 credential scope, in the Authorization
    header or a presigned X-Amz-Credential), as EC2 and moto pick it; None when unsigned."""
    auth = headers.get("Authorization") if headers is not None else None
    if auth:
        m = _SCOPE.search(auth)
        if m:
            return m.group(1)
    cred = params.get("X-Amz-Credential", "").split("/")
    return cred[2] if len(cred) >= 5 else None


def signed_access_key(headers, params: dict[str, str]) -> str:
    """The access key id a request is signed with (the principal making it); "" unsigned."""
    auth = headers.get("Authorization") if headers is not None else None
    cred = ""
    if auth and "Credential=" in auth:
        cred = auth.split("Credential=", 1)[1]
    else:
        cred = params.get("X-Amz-Credential", "")
    return cred.split("/", 1)[0].strip() if "/" in cred else ""


def list_param(params: dict[str, str], name: str, member: str | None = None) -> list[str]:
    """Values of `name.N` (or `name.N.member`), ordered by N."""
    found: list[tuple[int, str]] = []
    prefix = name + "."
    for key, value in params.items():
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        n, _, tail = rest.partition(".")
        if not n.isdigit() or (tail or None) != member:
            continue
        found.append((int(n), value))
    return [v for _, v in sorted(found)]


def int_param(params: dict[str, str], name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise invalid_value(f"Invalid value '{raw}' for {name}") from None


def bool_param(params: dict[str, str], name: str) -> bool:
    return params.get(name, "").lower() == "true"


def filters(params: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in params.items():
        m = re.fullmatch(r"Filter\.(\d+)\.Name", key)
        if m:
            out[value] = list_param(params, f"Filter.{m.group(1)}.Value")
    return out



def new_eni_addresses(params: dict[str, str]) -> tuple[str | None, list[str]]:
    """CreateNetworkInterface's requested primary (PrivateIpAddress, or the
    PrivateIpAddresses.N entry marked Primary) and secondary addresses."""
    listed = list(zip(list_param(params, "PrivateIpAddresses", "PrivateIpAddress"),
                      list_param(params, "PrivateIpAddresses", "Primary"), strict=False))
    secondaries = [ip for ip, primary in listed if primary.lower() != "true"]
    primary = params.get("PrivateIpAddress") or next(
        (ip for ip, p in listed if p.lower() == "true"), None)
    return primary, secondaries


def addresses_param(eni_id: str, ips: Iterable[str]) -> dict[str, str]:
    """The parameters that name an ENI and a list of addresses (Assign and Unassign)."""
    out = {"NetworkInterfaceId": eni_id}
    out.update({f"PrivateIpAddress.{n}": ip for n, ip in enumerate(ips, 1)})
    return out


def page(items: list, params: dict[str, str]) -> tuple[list, str | None]:
    """One page of a Describe answer by MaxResults and NextToken (the next page's offset),
    with the next page's token (None on the last)."""
    max_results = int_param(params, "MaxResults")
    start = 0
    token = params.get("NextToken")
    if token:
        if not token.isdigit():
            raise invalid_value(f"Invalid value '{token}' for NextToken")
        start = int(token)
    if max_results is None:
        return items[start:], None
    if not 5 <= max_results <= 1000:
        raise invalid_value(f"Value ({max_results}) for parameter maxResults is invalid. "
                            "Expecting a value between 5 and 1000.")
    next_token = str(start + max_results) if start + max_results < len(items) else None
    return items[start:start + max_results], next_token

# -- errors and small responses -------------------------------------------------------------

def request_id() -> str:
    return str(uuid.uuid4())


def error_xml(err: Ec2Error) -> bytes:
    return XML_DECL + (
        f"<Response><Errors><Error><Code>{escape(err.code)}</Code>"
        f"<Message>{escape(err.message)}</Message></Error></Errors>"
        f"<RequestID>{request_id()}</RequestID></Response>"
    ).encode()


def action_xml(action: str, inner: str) -> bytes:
    return XML_DECL + (
        f'<{action}Response xmlns="{NS}"><requestId>{request_id()}</requestId>'
        f"{inner}</{action}Response>"
    ).encode()


def items(tag: str, member: str, values: Iterable[str]) -> str:
    body = "".join(f"<item><{member}>{escape(v)}</{member}></item>" for v in values)
    return f"<{tag}>{body}</{tag}>"


def assign_xml(eni_id: str, ips: list[str], prefixes: list[str]) -> bytes:
    return action_xml(
        "AssignPrivateIpAddresses",
        f"<networkInterfaceId>{eni_id}</networkInterfaceId>"
        + items("assignedPrivateIpAddressesSet", "privateIpAddress", ips)
        + items("assignedIpv4PrefixSet", "ipv4Prefix", prefixes),
    )


def assign_ipv6_xml(eni_id: str, addresses: list[str], prefixes: list[str]) -> bytes:
    return action_xml(
        "AssignIpv6Addresses",
        plain_items("assignedIpv6Addresses", addresses)
        + plain_items("assignedIpv6PrefixSet", prefixes)
        + f"<networkInterfaceId>{eni_id}</networkInterfaceId>",
    )


def unassign_ipv6_xml(eni_id: str, addresses: list[str], prefixes: list[str]) -> bytes:
    return action_xml(
        "UnassignIpv6Addresses",
        f"<networkInterfaceId>{eni_id}</networkInterfaceId>"
        + plain_items("unassignedIpv6Addresses", addresses)
        + plain_items("unassignedIpv6PrefixSet", prefixes),
    )


def plain_items(tag: str, values: Iterable[str]) -> str:
    """A list of strings as EC2 renders one: each value an <item> of its own."""
    body = "".join(f"<item>{escape(v)}</item>" for v in values)
    return f"<{tag}>{body}</{tag}>"


def ipv6_addresses_param(eni_id: str, addresses: Iterable[str]) -> dict[str, str]:
    """The parameters of Assign/UnassignIpv6Addresses that name an ENI and addresses."""
    out = {"NetworkInterfaceId": eni_id}
    out.update({f"Ipv6Addresses.{n}": a for n, a in enumerate(addresses, 1)})
    return out


def return_true_xml(action: str) -> bytes:
    return action_xml(action, "<return>true</return>")


# -- parsing upstream XML -------------------------------------------------------------------

def parse_xml(body: bytes) -> ET.Element:
    root = ET.fromstring(body)
    for el in root.iter():
        if isinstance(el.tag, str) and "}" in el.tag:
            el.tag = el.tag.split("}", 1)[1]
    return root


def upstream_error(body: bytes) -> tuple[str, str] | None:
    """(code, message) when body is an EC2 error document."""
    try:
        root = parse_xml(body)
    except ET.ParseError:
        return None
    err = root.find(".//Errors/Error")
    if err is None:
        return None
    return err.findtext("Code") or "", err.findtext("Message") or ""


def _text(el: ET.Element, path: str, default: str = "") -> str:
    value = el.findtext(path)
    return default if value is None else value


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
    )


def enis_from_describe(body: bytes) -> list[ET.Element]:
    return parse_xml(body).findall("networkInterfaceSet/item")



def eni_from_created(body: bytes) -> Eni:
    """The ENI in a CreateNetworkInterface answer."""
    item = parse_xml(body).find("networkInterface")
    item.tag = "item"
    return eni_from_item(item)


def attachment_from(body: bytes, instance_id: str, device_index: int) -> Attachment:
    """The attachment an AttachNetworkInterface answer names, made now."""
    return Attachment(attachment_id=parse_xml(body).findtext("attachmentId") or "",
                      instance_id=instance_id, device_index=device_index,
                      delete_on_termination=False, attach_time=now_iso())


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")

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


def with_available_counts(body: bytes, available) -> bytes:
    """A DescribeSubnets answer with each subnet's availableIpAddressCount replaced by
    `available(subnet_id)` (kept where that is None)."""
    root = parse_xml(body)
    for s in root.findall("subnetSet/item"):
        count = available(_text(s, "subnetId"))
        el = s.find("availableIpAddressCount")
        if count is not None and el is not None:
            el.text = str(count)
    root.set("xmlns", NS)
    return XML_DECL + ET.tostring(root)


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
        enis = it.findtext("networkInfo/maximumNetworkInterfaces")
        ips = it.findtext("networkInfo/ipv4AddressesPerInterface")
        ipv6 = it.findtext("networkInfo/ipv6AddressesPerInterface")
        if _text(it, "networkInfo/ipv6Supported") == "false":
            ipv6 = "0"
        if enis and ips:
            out[_text(it, "instanceType")] = InstanceLimits(
                int(enis), int(ips), int(ipv6) if ipv6 else None)
    return out


# -- rendering ENIs from the mirror ------------------------------------------------------------

def _set(parent: ET.Element, tag: str, text: str) -> ET.Element:
    el = ET.SubElement(parent, tag)
    el.text = text
    return el


@functools.lru_cache(maxsize=8192)
def render_eni(eni: Eni) -> bytes:
    """The upstream's <item> for this ENI with the gate's truth for addresses and attachment."""
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
        _set(a, "networkCardIndex", "0")
        _set(a, "instanceId", att.instance_id)
        _set(a, "instanceOwnerId", _text(item, "ownerId", "123456789012"))
        _set(a, "status", att.status)
    _set(item, "status", "in-use" if att is not None else "available")
    return ET.tostring(item)


def describe_enis_xml(enis: list[Eni], next_token: str | None) -> bytes:
    token = f"<nextToken>{next_token}</nextToken>" if next_token else ""
    body = b"".join(render_eni(e) for e in enis)
    head = f'<DescribeNetworkInterfacesResponse xmlns="{NS}"><requestId>{request_id()}</requestId>'
    return (XML_DECL + head.encode() + b"<networkInterfaceSet>" + body
            + b"</networkInterfaceSet>" + token.encode() + b"</DescribeNetworkInterfacesResponse>")


def created_eni_xml(eni: Eni) -> bytes:
    inner = render_eni(eni).decode()
    inner = "<networkInterface>" + inner[len("<item>"):-len("</item>")] + "</networkInterface>"
    return action_xml("CreateNetworkInterface", inner)



def merge_reservations(bodies: list[bytes]) -> bytes:
    """One RunInstances answer from several single-instance ones (the gate launches one at a time)."""
    if len(bodies) == 1:
        return bodies[0]
    first = parse_xml(bodies[0])
    target = first.find("instancesSet")
    for body in bodies[1:]:
        for item in parse_xml(body).findall("instancesSet/item"):
            target.append(item)
    first.set("xmlns", NS)
    return XML_DECL + ET.tostring(first)

# -- filtering ENIs (DescribeNetworkInterfaces) ------------------------------------------------

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
        "interface-type": [_text(item, "interfaceType")],
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
    for name, patterns in wanted.items():
        values = eni_field(eni, name)
        if values is None:
            raise invalid_value(f"The filter '{name}' is invalid")
        if not any(fnmatch.fnmatchcase(v, p) for v in values for p in patterns):
            return False
    return True
