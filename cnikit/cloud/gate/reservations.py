"""Subnet CIDR reservations: CreateSubnetCidrReservation, DeleteSubnetCidrReservation and
GetSubnetCidrReservations.

IPv4 ones are forwarded (the upstream checks the range and keeps the reservation), then kept
in the mirror, whose address picking honours them (cnikit/cloud/reservations.py). IPv6 ones
live in the gate alone, as /80 prefixes do: moto (5.2, and LocalStack with it) walks every
address of a reservation when it makes one, so a reservation of a /72 or wider never
returns. The gate checks them as moto checks IPv4 ones and adds them to Get's answer.
"""

from __future__ import annotations

import ipaddress
import secrets
import xml.etree.ElementTree as ET

from cnikit.cloud import responses as R
from cnikit.cloud.errors import invalid_value, missing
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region
from cnikit.cloud.reservations import EXPLICIT, PREFIX, Reservation

FIELDS = ("subnetCidrReservationId", "subnetId", "cidr", "reservationType")


def reservation_from(item: ET.Element | None) -> Reservation | None:
    if item is None:
        return None
    return Reservation(*(R.text(item, f) for f in FIELDS))


def reservation_xml(parent: ET.Element, r: Reservation) -> ET.Element:
    for tag, value in zip(FIELDS, (r.reservation_id, r.subnet_id, r.cidr, r.kind),
                          strict=True):
        ET.SubElement(parent, tag).text = value
    return parent


def answer(action_name: str, tag: str, r: Reservation) -> bytes:
    el = reservation_xml(ET.Element(tag), r)
    return R.action_xml(action_name, ET.tostring(el, encoding="unicode"))


def ipv6_cidr(raw: str | None) -> ipaddress.IPv6Network | None:
    """The reservation's range when it is an IPv6 one; a malformed one is refused."""
    if raw is None:
        raise missing("Cidr")
    try:
        net = ipaddress.ip_network(raw, strict=True)
    except ValueError:
        raise invalid_value(f"Value ({raw}) for parameter cidr is invalid. This is not a "
                            "valid CIDR block.") from None
    return net if net.version == 6 else None


class ReservationActions(ActionGroup):
    @action("CreateSubnetCidrReservation")
    async def _create(self, r: Region, params, headers) -> tuple[int, bytes]:
        kind = params.get("ReservationType")
        if kind is None:
            raise missing("ReservationType")
        if kind not in (EXPLICIT, PREFIX):
            raise invalid_value(f"Value ({kind}) for parameter reservationType is invalid. "
                                f"Valid values: {PREFIX}, {EXPLICIT}")
        b = self.backend
        async with b.lock:
            subnet = r.mirror.subnet(params.get("SubnetId"))
            net = ipv6_cidr(params.get("Cidr"))
            if net is not None:
                made = self._ipv6_reservation(r, subnet, net, kind)
                b.mutate(r, r.mirror.reservations.add, made)
                return 200, answer("CreateSubnetCidrReservation", "subnetCidrReservation",
                                   made)
            status, out = await b.pass_through(r.name, params, headers)
            made = reservation_from(R.parse_xml(out).find("subnetCidrReservation"))
            if made is not None:
                b.mutate(r, r.mirror.reservations.add, made)
        return status, out

    @staticmethod
    def _ipv6_reservation(r: Region, subnet, net: ipaddress.IPv6Network,
                          kind: str) -> Reservation:
        """EC2's checks of an IPv6 reservation (moto's words for its IPv4 ones)."""
        if subnet.ipv6_cidr is None or not net.subnet_of(subnet.ipv6_cidr):
            raise invalid_value("Reservation CIDR should be within subnet CIDR block "
                                f"({subnet.ipv6_cidr or 'none'})")
        for other in r.mirror.reservations.of(subnet.subnet_id, 6):
            if net.overlaps(ipaddress.IPv6Network(other.cidr)):
                raise invalid_value(f"Reservation CIDR {net} has overlap with existing "
                                    "reserved CIDR block")
        return Reservation(f"scr-{secrets.token_hex(9)[:17]}", subnet.subnet_id, str(net), kind)

    @action("DeleteSubnetCidrReservation")
    async def _delete(self, r: Region, params, headers) -> tuple[int, bytes]:
        b = self.backend
        rid = params.get("SubnetCidrReservationId", "")
        async with b.lock:
            held = r.mirror.reservations.by_id.get(rid)
            if held is not None and held.version == 6:
                b.mutate(r, r.mirror.reservations.drop, rid)
                return 200, answer("DeleteSubnetCidrReservation",
                                   "deletedSubnetCidrReservation", held)
            status, out = await b.pass_through(r.name, params, headers)
            b.mutate(r, r.mirror.reservations.drop, rid)
        return status, out

    @action("GetSubnetCidrReservations")
    async def _get(self, r: Region, params, headers) -> tuple[int, bytes]:
        status, out = await self.backend.pass_through(r.name, params, headers)
        mine = r.mirror.reservations.of(params.get("SubnetId", ""), 6)
        if not mine:
            return status, out
        root = R.parse_xml(out)
        found = root.find("subnetIpv6CidrReservationSet")
        if found is None:
            found = ET.SubElement(root, "subnetIpv6CidrReservationSet")
        for res in mine:
            reservation_xml(ET.SubElement(found, "item"), res)
        return status, R.document(root)
