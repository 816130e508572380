"""Subnet CIDR reservations (CreateSubnetCidrReservation) as the gate's address picking
honours them.

moto keeps reservations and answers their actions, but picks addresses as if there were
none; the gate picks every address itself (models.Mirror), so it keeps its own copy of each
reservation (`Mirror.reservations`), made and dropped by the gate's handlers of Create and
Delete, kept across resyncs and dropped with its subnet.

What EC2 does with the two types (CreateSubnetCidrReservation, "ReservationType"):
- `explicit`: only a caller naming an address or prefix gets one from the range; nothing
  picked for a count (SecondaryPrivateIpAddressCount, Ipv4PrefixCount, their IPv6 twins)
  comes from it;
- `prefix`: the range is kept for delegated prefixes: a count of prefixes is served from it
  first (upstream VPC CNI's advice for prefix delegation in a busy subnet, #2749), and
  single addresses are never picked from it.
A reservation is, with the addresses in use, the other way a subnet runs out of aligned /28
blocks while it still has single addresses (InsufficientCidrBlocks).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

EXPLICIT, PREFIX = "explicit", "prefix"


@dataclass(frozen=True)
class Reservation:
    reservation_id: str
    subnet_id: str
    cidr: str
    kind: str  # EXPLICIT or PREFIX

    @property
    def span(self) -> tuple[int, int]:
        """The first and the last address of the range, as ints."""
        net = ipaddress.ip_network(self.cidr, strict=False)
        return int(net.network_address), int(net.broadcast_address)

    @property
    def version(self) -> int:
        return ipaddress.ip_network(self.cidr, strict=False).version


class Reservations:
    """One region's reservations by id, with the questions address picking asks."""

    def __init__(self) -> None:
        self.by_id: dict[str, Reservation] = {}

    def add(self, r: Reservation) -> None:
        self.by_id[r.reservation_id] = r

    def drop(self, reservation_id: str) -> None:
        self.by_id.pop(reservation_id, None)

    def keep_subnets(self, subnet_ids: Iterable[str]) -> None:
        """Forget the reservations of subnets that are gone (a resync without them)."""
        alive = set(subnet_ids)
        self.by_id = {k: r for k, r in self.by_id.items() if r.subnet_id in alive}

    def of(self, subnet_id: str, version: int, kind: str | None = None) -> list[Reservation]:
        return [r for r in self.by_id.values() if r.subnet_id == subnet_id
                and r.version == version and (kind is None or r.kind == kind)]

    def blocking(self, subnet_id: str, version: int, prefixes: bool) -> list[tuple[int, int]]:
        """The ranges a pick for a count may not take from: the explicit reservations, and
        the prefix ones too when single addresses are picked (`prefixes` False)."""
        return [r.span for r in self.of(subnet_id, version)
                if r.kind == EXPLICIT or not prefixes]

    def prefix_spans(self, subnet_id: str, version: int) -> list[tuple[int, int]]:
        """The ranges kept for delegated prefixes, lowest first."""
        return sorted(r.span for r in self.of(subnet_id, version, PREFIX))


def meets(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end] overlaps any of `spans`."""
    return any(lo <= end and start <= hi for lo, hi in spans)
