"""VPC IPv6 blocks: CreateVpc and DescribeVpcs, and CreateSubnet's IPv6 block.

A VPC's /56 is Amazon-provided (AmazonProvidedIpv6CidrBlock: moto picks one) or given
(Ipv6CidrBlock from an IPv6 pool, BYOIP): moto keeps no given block, so the gate keeps it
and shows it in CreateVpc's and DescribeVpcs' answers. A subnet's IPv6 block must be a /64
of one of its VPC's blocks, as EC2 requires (moto takes any).
"""

from __future__ import annotations

import ipaddress
import uuid
import xml.etree.ElementTree as ET

from cnikit.cloud import responses as R
from cnikit.cloud.errors import Ec2Error, invalid_value
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region


def _ipv6_block(raw: str, prefixlen: int, wrong_size: str) -> ipaddress.IPv6Network:
    """An `ipv6CidrBlock` parameter as EC2 takes it: a valid block of `prefixlen`, else
    InvalidParameterValue (`wrong_size`: the message for a block of another size)."""
    try:
        net = ipaddress.IPv6Network(raw, strict=True)
    except ValueError:
        raise invalid_value(f"Value ({raw}) for parameter ipv6CidrBlock is invalid. This is "
                            "not a valid IPv6 CIDR block.") from None
    if net.prefixlen != prefixlen:
        raise invalid_value(wrong_size)
    return net


def _given_block(raw: str) -> str:
    return str(_ipv6_block(raw, 56, f"Value ({raw}) for parameter ipv6CidrBlock is invalid. "
                                    "The IPv6 CIDR block of a VPC must be a /56."))


def _add_association(vpc: ET.Element, block: str, pool: str) -> None:
    assoc_set = vpc.find("ipv6CidrBlockAssociationSet")
    if assoc_set is None:
        assoc_set = ET.SubElement(vpc, "ipv6CidrBlockAssociationSet")
    item = ET.SubElement(assoc_set, "item")
    for tag, text in (("associationId", f"vpc-cidr-assoc-{uuid.uuid4().hex[:17]}"),
                      ("ipv6CidrBlock", block), ("ipv6Pool", pool),
                      ("networkBorderGroup", "")):
        ET.SubElement(item, tag).text = text
    ET.SubElement(ET.SubElement(item, "ipv6CidrBlockState"), "state").text = "associated"


def _rewrite(body: bytes, path: str, given: dict[str, tuple[str, str]]) -> bytes:
    root = R.parse_xml(body)
    for vpc in root.findall(path):
        found = given.get(vpc.findtext("vpcId") or "")
        if found is not None:
            _add_association(vpc, *found)
    return R.document(root)


class VpcActions(ActionGroup):
    @action("CreateVpc")
    async def _create_vpc(self, r: Region, params, headers) -> tuple[int, bytes]:
        block = params.get("Ipv6CidrBlock")
        pool = params.get("Ipv6Pool") or "ipv6pool-ec2-byoip"
        if block is None:
            return await self.backend.forward_unmodelled(r, "CreateVpc", params, headers)
        block = _given_block(block)
        taken = [b for b, _ in r.given_ipv6.values()]
        if any(ipaddress.IPv6Network(block).overlaps(ipaddress.IPv6Network(t)) for t in taken):
            raise Ec2Error("InvalidVpc.Range", f"The IPv6 CIDR {block} is already in use")
        fwd = {k: v for k, v in params.items() if not k.startswith("Ipv6")}
        status, out = await self.backend.forward_unmodelled(r, "CreateVpc", fwd, headers)
        vpc_id = R.parse_xml(out).findtext("vpc/vpcId") or ""
        r.given_ipv6[vpc_id] = (block, pool)
        return status, _rewrite(out, "vpc", r.given_ipv6)

    @action("DescribeVpcs")
    async def _describe_vpcs(self, r: Region, params, headers) -> tuple[int, bytes]:
        status, out = await self.backend.pass_through(r.name, params, headers)
        return status, _rewrite(out, "vpcSet/item", r.given_ipv6) if r.given_ipv6 else out

    @action("CreateSubnet")
    async def _create_subnet(self, r: Region, params, headers) -> tuple[int, bytes]:
        block = params.get("Ipv6CidrBlock")
        if block:
            await self._check_subnet_block(r, params.get("VpcId") or "", block)
        return await self.backend.forward_unmodelled(r, "CreateSubnet", params, headers)

    async def _check_subnet_block(self, r: Region, vpc_id: str, raw: str) -> None:
        net = _ipv6_block(raw, 64, f"The IPv6 CIDR block {raw} of a subnet must be a /64")
        body = await self.backend.call(r.name, "DescribeVpcs", {"VpcId.1": vpc_id})
        blocks = [b.text for b in R.parse_xml(_rewrite(body, "vpcSet/item", r.given_ipv6))
                  .iter("ipv6CidrBlock") if b.text]
        if not any(net.subnet_of(ipaddress.IPv6Network(b)) for b in blocks):
            raise Ec2Error("InvalidSubnet.Range",
                           f"The IPv6 CIDR '{raw}' is invalid for the VPC's IPv6 blocks "
                           f"({', '.join(blocks) or 'none'}).")
