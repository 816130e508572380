"""The gate's mirror of EC2 state (its records: records.py) and the rules real EC2
enforces on it.

No wire format here: `upstream_xml.py` reads the upstream's XML into records, the gate
(cnikit/cloud/gate/) renders its answers and moves bytes. The mirror is the gate's truth: it is loaded from the upstream at start (and
after any mutating call the gate does not model), then changed only by the calls the gate
forwarded successfully. Records are frozen and replaced on change, so a snapshot of the
mirror (for `describe-lag` and for ownership) is a shallow dict copy.

Rules (each `plan_*` raises Ec2Error and changes nothing; `apply_*` changes the mirror):
- an IP is held by at most one ENI per VPC; AllowReassignment moves a secondary IP;
- addresses stay inside their subnet and never use the network address, the first three
  hosts (AWS reserved) or the broadcast address;
- the gate picks addresses for count-based requests (lowest free first) so the upstream
  never chooses;
- per-ENI IPv4 slots (each /28 prefix is one slot) and the ENI limits of the instance and
  of each of its network cards come from the instance type; one ENI per device index of a
  card;
- /28 prefixes are aligned, inside the subnet, and never overlap an address in use: a
  subnet whose free addresses are scattered has no /28 to give (InsufficientCidrBlocks);
- subnet CIDR reservations (reservations.py): a pick for a count never takes from an
  explicit one, single addresses never from a prefix one, and prefixes from those first;
- RunInstances' counts are sane, and only a one-instance launch may name its address.
- IPv6: an address is held by at most one ENI
  per VPC, lies inside its subnet's /64 (neither its first four nor its last address) and
  outside every delegated /80; a /80 is aligned, inside the /64 and overlaps no address or
  other prefix; addresses plus /80s per ENI stay within the type's IPv6 limit.
- ENI trunking: trunk and branch ENIs and their associations (trunks.py).

A Mirror holds one region, as EC2 keeps regions apart (the same CIDRs and even the same
addresses live in two regions without meeting). All regions' mirrors share one `Versions`,
so a single version grows on a change anywhere and one long-poll follows every region.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from cnikit.cloud import trunks
from cnikit.cloud.errors import (
    Ec2Error,
    eni_not_found,
    instance_not_found,
    insufficient_addresses,
    insufficient_cidr_blocks,
    invalid_value,
    subnet_not_found,
)
from cnikit.cloud.limits import UNATTACHED, InstanceLimits
from cnikit.cloud.ownership import OwnershipSnapshot, build_snapshot
from cnikit.cloud.records import (
    IPV6_HOST_BITS,
    IPV6_PREFIX_LEN,
    Attachment,
    Eni,
    InstanceState,
    Subnet,
    TrunkAssociation,
)
from cnikit.cloud.reservations import Reservations, meets

PREFIX_LEN = 28
PREFIX_SIZE = 16
# EC2 keeps the network address, the first three hosts and the broadcast address.
RESERVED_PER_SUBNET = 5


@dataclass
class AssignPlan:
    eni_id: str
    ips: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    moves: dict[str, str] = field(default_factory=dict)  # ip -> ENI it is taken from


def prefix_addresses(prefix: str) -> range:
    net = ipaddress.IPv4Network(prefix)
    start = int(net.network_address)
    return range(start, start + net.num_addresses)


class Versions:
    """What every region's mirror shares: one version that grows on a change in any of them,
    and the regions the gate serves (in the order it met them)."""

    def __init__(self, regions: tuple[str, ...] = ()):
        self.value = 0
        self.regions = regions


class Mirror:
    """ENIs, subnets and instances of one region as EC2 holds them, with per-subnet address
    indexes."""

    def __init__(self, limits_for: Callable[[str], InstanceLimits | None],
                 region: str = "us-east-1", versions: Versions | None = None):
        self.limits_for = limits_for
        self.region = region
        self.versions = versions or Versions((region,))
        self.subnets: dict[str, Subnet] = {}
        self.instances: dict[str, InstanceState] = {}
        self.enis: dict[str, Eni] = {}
        self._ip_owner: dict[tuple[str, str], str] = {}  # (vpc, ip) -> eni
        self._used: dict[str, set[int]] = {}  # subnet -> addresses held (IPs and prefixes)
        # IPv6, per subnet: addresses held, how many of them each /80 block holds, and the
        # blocks delegated as prefixes (a /80 has 2**48 addresses: never expanded).
        self._v6_used: dict[str, set[int]] = {}
        self._v6_blocks_used: dict[str, dict[int, int]] = {}
        self._v6_delegated: dict[str, set[int]] = {}
        # Every /80 ever delegated, per subnet: EC2 picks a new /80 at random among a /64's
        # 2**16, so one just given back practically never comes back to the next Assign. The
        # lowest free one would: a build that drops the /80 under its pods and takes a new one
        # would get the same back, its pods dark for a millisecond only, and go unseen.
        self._v6_ever_delegated: dict[str, set[int]] = {}
        self._snapshot: OwnershipSnapshot | None = None
        # ENIs in an attach or detach that takes time (the `slow-attachment` fault): eni ->
        # its attachment as EC2 shows it meanwhile ("attaching", "detaching"). The upstream
        # made the change at once, so a resync keeps these over what it reads.
        self.pending: dict[str, Attachment] = {}
        # Branch ENIs on trunks (trunks.py): association id -> association. The upstream
        # models no trunking, so these and the ENIs' types are the gate's alone.
        self.associations: dict[str, TrunkAssociation] = {}
        # Subnet CIDR reservations: moto keeps them but picks as if there were none.
        self.reservations = Reservations()

    # -- loading and changing -------------------------------------------------------------

    def load(self, subnets: Iterable[Subnet], instances: Iterable[InstanceState],
             enis: Iterable[Eni]) -> None:
        """Replace everything (a resync); keeps the version growing."""
        old = self.enis
        self.subnets = {s.subnet_id: s for s in subnets}
        self.instances = {i.instance_id: i for i in instances}
        self.enis = {}
        self._ip_owner = {}
        self._used = {s: set() for s in self.subnets}
        self._v6_used, self._v6_blocks_used, self._v6_delegated = {}, {}, {}
        for eni in enis:
            held = self.pending.get(eni.eni_id)
            kept = old.get(eni.eni_id)
            if kept is not None and eni.interface_type == "interface":
                # moto shows every ENI as "interface": the gate's own type stands.
                eni = replace(eni, interface_type=kept.interface_type)
            if kept is not None and kept.attachment and eni.attachment and \
                    kept.attachment.attachment_id == eni.attachment.attachment_id:
                eni = replace(eni, attachment=replace(  # and so does its network card
                    eni.attachment, network_card_index=kept.attachment.network_card_index))
            self._index(eni if held is None else replace(eni, attachment=held))
        self.pending = {e: a for e, a in self.pending.items() if e in self.enis}
        self.reservations.keep_subnets(self.subnets)
        for assoc in list(self.associations.values()):
            if assoc.branch_id not in self.enis or assoc.trunk_id not in self.enis:
                trunks.drop(self, assoc.association_id)
        self.changed()

    def put_eni(self, eni: Eni) -> None:
        old = self.enis.get(eni.eni_id)
        if old is not None:
            self._unindex(old)
        self._index(eni)

    def drop_eni(self, eni_id: str) -> None:
        old = self.enis.get(eni_id)
        if old is not None:
            self._unindex(old)

    def put_instance(self, inst: InstanceState) -> None:
        self.instances[inst.instance_id] = inst

    @property
    def version(self) -> int:
        return self.versions.value

    def changed(self) -> None:
        self.versions.value += 1
        self._snapshot = None

    def _index(self, eni: Eni) -> None:
        self.enis[eni.eni_id] = eni
        used = self._used.setdefault(eni.subnet_id, set())
        for ip in eni.ips:
            self._ip_owner[(eni.vpc_id, ip)] = eni.eni_id
            used.add(int(ipaddress.IPv4Address(ip)))
        for p in eni.prefixes:
            used.update(prefix_addresses(p))
        v6 = self._v6_used.setdefault(eni.subnet_id, set())
        blocks = self._v6_blocks_used.setdefault(eni.subnet_id, {})
        for ip in eni.ipv6s:
            self._ip_owner[(eni.vpc_id, ip)] = eni.eni_id
            value = int(ipaddress.IPv6Address(ip))
            v6.add(value)
            blocks[value >> IPV6_HOST_BITS] = blocks.get(value >> IPV6_HOST_BITS, 0) + 1
        delegated = self._v6_delegated.setdefault(eni.subnet_id, set())
        delegated.update(ipv6_block(p) for p in eni.ipv6_prefixes)
        self._v6_ever_delegated.setdefault(eni.subnet_id, set()).update(
            ipv6_block(p) for p in eni.ipv6_prefixes)

    def _unindex(self, eni: Eni) -> None:
        del self.enis[eni.eni_id]
        used = self._used.get(eni.subnet_id, set())
        for ip in eni.ips:
            if self._ip_owner.get((eni.vpc_id, ip)) == eni.eni_id:
                del self._ip_owner[(eni.vpc_id, ip)]
            used.discard(int(ipaddress.IPv4Address(ip)))
        for p in eni.prefixes:
            used.difference_update(prefix_addresses(p))
        v6 = self._v6_used.get(eni.subnet_id, set())
        blocks = self._v6_blocks_used.get(eni.subnet_id, {})
        for ip in eni.ipv6s:
            if self._ip_owner.get((eni.vpc_id, ip)) == eni.eni_id:
                del self._ip_owner[(eni.vpc_id, ip)]
            value = int(ipaddress.IPv6Address(ip))
            v6.discard(value)
            left = blocks.get(value >> IPV6_HOST_BITS, 1) - 1
            if left > 0:
                blocks[value >> IPV6_HOST_BITS] = left
            else:
                blocks.pop(value >> IPV6_HOST_BITS, None)
        self._v6_delegated.get(eni.subnet_id, set()).difference_update(
            ipv6_block(p) for p in eni.ipv6_prefixes)

    # -- lookups --------------------------------------------------------------------------

    def eni(self, eni_id: str | None) -> Eni:
        eni = self.enis.get(eni_id or "")
        if eni is None:
            raise eni_not_found(str(eni_id))
        return eni

    def subnet(self, subnet_id: str | None) -> Subnet:
        subnet = self.subnets.get(subnet_id or "")
        if subnet is None:
            raise subnet_not_found(str(subnet_id))
        return subnet

    def instance(self, instance_id: str | None) -> InstanceState:
        inst = self.instances.get(instance_id or "")
        if inst is None or inst.state == "terminated":
            raise instance_not_found(str(instance_id))
        return inst

    def ip_owner(self, vpc_id: str, ip: str) -> str | None:
        return self._ip_owner.get((vpc_id, ip))

    def eni_by_attachment(self, attachment_id: str) -> Eni | None:
        for eni in self.enis.values():
            if eni.attachment and eni.attachment.attachment_id == attachment_id:
                return eni
        return None

    def instance_enis(self, instance_id: str) -> list[Eni]:
        return [e for e in self.enis.values()
                if e.attachment and e.attachment.instance_id == instance_id]

    def eni_limits(self, eni: Eni) -> InstanceLimits:
        if eni.attachment is None:
            return UNATTACHED
        inst = self.instances.get(eni.attachment.instance_id)
        limits = self.limits_for(inst.instance_type) if inst else None
        return limits or UNATTACHED

    def available_ips(self, subnet_id: str) -> int | None:
        """AvailableIpAddressCount as EC2 counts it: the subnet's size less the five reserved
        addresses, every assigned IP (primary and secondary) and 16 per delegated /28."""
        subnet = self.subnets.get(subnet_id)
        if subnet is None:
            return None
        if subnet.cidr is None:  # IPv6-only: EC2 counts IPv4 addresses here, and has none
            return 0
        used = len(self._used.get(subnet_id, ()))
        return max(subnet.cidr.num_addresses - RESERVED_PER_SUBNET - used, 0)

    def default_subnet(self, az: str | None) -> Subnet | None:
        defaults = sorted((s for s in self.subnets.values() if s.default_for_az),
                          key=lambda s: s.az)
        for s in defaults:
            if az is None or s.az == az:
                return s
        return None

    # -- address picking ------------------------------------------------------------------

    def pick_ips(self, subnet: Subnet, count: int, taken: set[int] = frozenset()) -> list[str]:
        used = self._used.get(subnet.subnet_id, set())
        reserved = self.reservations.blocking(subnet.subnet_id, 4, prefixes=False)
        picked: list[str] = []
        value = subnet.first_usable
        while len(picked) < count and value <= subnet.last_usable:
            if value not in used and value not in taken and not meets(reserved, value, value):
                picked.append(str(ipaddress.IPv4Address(value)))
            value += 1
        if len(picked) < count:
            raise insufficient_addresses()
        return picked

    def pick_prefixes(self, subnet: Subnet, count: int, taken: set[int] = frozenset()) -> list[str]:
        used = self._used.get(subnet.subnet_id, set())
        reserved = self.reservations.blocking(subnet.subnet_id, 4, prefixes=True)
        kept = self.reservations.prefix_spans(subnet.subnet_id, 4)
        picked: list[str] = []
        if subnet.cidr.prefixlen <= PREFIX_LEN:
            blocks = list(subnet.cidr.subnets(new_prefix=PREFIX_LEN))
            # the blocks a prefix reservation keeps first, as EC2 serves them
            blocks.sort(key=lambda b: not any(lo <= int(b.network_address) <= hi
                                              for lo, hi in kept))
            for block in blocks:
                if len(picked) == count:
                    break
                start = int(block.network_address)
                if self._prefix_free(subnet, block, used, taken) and \
                        not meets(reserved, start, start + PREFIX_SIZE - 1):
                    picked.append(str(block))
        if len(picked) < count:
            raise insufficient_cidr_blocks()
        return picked

    @staticmethod
    def _prefix_free(subnet: Subnet, block: ipaddress.IPv4Network, used: set[int],
                     taken: set[int]) -> bool:
        start = int(block.network_address)
        if start < subnet.first_usable or start + PREFIX_SIZE - 1 > subnet.last_usable:
            return False
        return not any(v in used or v in taken for v in range(start, start + PREFIX_SIZE))

    def check_prefix(self, subnet: Subnet, prefix: str, taken: set[int]) -> str:
        block = aligned_prefix(prefix, ipaddress.IPv4Network, PREFIX_LEN, subnet.cidr,
                               "the subnet's address range")
        if not self._prefix_free(subnet, block, self._used.get(subnet.subnet_id, set()), taken):
            raise invalid_value(f"Prefix {prefix} overlaps addresses in use or reserved")
        return str(block)

    # -- IPv6 -------------------------------------------------------------------------------

    def _v6_block_free(self, subnet: Subnet, block: int, taken_blocks: set[int]) -> bool:
        """Whether the /80 `block` may be delegated: whole inside the subnet's usable range,
        holding no address and not delegated already."""
        start, end = block << IPV6_HOST_BITS, ((block + 1) << IPV6_HOST_BITS) - 1
        return (subnet.first_usable_v6 <= start and end <= subnet.last_usable_v6
                and block not in self._v6_blocks_used.get(subnet.subnet_id, {})
                and block not in self._v6_delegated.get(subnet.subnet_id, set())
                and block not in taken_blocks)

    def pick_ipv6s(self, subnet: Subnet, count: int, taken: set[int]) -> list[str]:
        """`count` free addresses, lowest first, outside every delegated /80."""
        used = self._v6_used.get(subnet.subnet_id, set())
        delegated = self._v6_delegated.get(subnet.subnet_id, set())
        reserved = self.reservations.blocking(subnet.subnet_id, 6, prefixes=False)
        picked: list[str] = []
        value = subnet.first_usable_v6
        while len(picked) < count and value <= subnet.last_usable_v6:
            block = value >> IPV6_HOST_BITS
            if block in delegated:  # the whole /80 is someone's: jump past it
                value = (block + 1) << IPV6_HOST_BITS
                continue
            span = next((hi for lo, hi in reserved if lo <= value <= hi), None)
            if span is not None:  # a reservation may span many /80s: jump past it
                value = span + 1
                continue
            if value not in used and value not in taken:
                picked.append(str(ipaddress.IPv6Address(value)))
            value += 1
        if len(picked) < count:
            raise insufficient_addresses()
        return picked

    def pick_ipv6_prefixes(self, subnet: Subnet, count: int, taken_blocks: set[int]) -> list[str]:
        first = subnet.first_usable_v6 >> IPV6_HOST_BITS
        last = subnet.last_usable_v6 >> IPV6_HOST_BITS
        reserved = self.reservations.blocking(subnet.subnet_id, 6, prefixes=True)
        picked: list[str] = []
        # the /80s a prefix reservation keeps first, as EC2 serves them, then the rest
        ranges = [(max(lo >> IPV6_HOST_BITS, first), min(hi >> IPV6_HOST_BITS, last))
                  for lo, hi in self.reservations.prefix_spans(subnet.subnet_id, 6)]
        ever = self._v6_ever_delegated.get(subnet.subnet_id, set())
        # Never-delegated /80s first; one given back before only when no other is left.
        passes = [(lo, hi, ever) for lo, hi in ranges + [(first, last)]]
        passes += [(lo, hi, set()) for lo, hi in ranges + [(first, last)]]
        for lo, hi, skip in passes:
            block = lo
            while len(picked) < count and block <= hi:
                start = block << IPV6_HOST_BITS
                span = next((h for a, h in reserved
                             if a <= start + (1 << IPV6_HOST_BITS) - 1 and start <= h), None)
                if span is not None:  # an explicit reservation: jump past it
                    block = (span >> IPV6_HOST_BITS) + 1
                    continue
                if block in skip:
                    block += 1
                    continue
                if ipv6_prefix_of(block) not in picked and \
                        self._v6_block_free(subnet, block, taken_blocks):
                    picked.append(ipv6_prefix_of(block))
                block += 1
        if len(picked) < count:
            raise insufficient_cidr_blocks()
        return picked

    def check_ipv6_prefix(self, subnet: Subnet, prefix: str, taken_blocks: set[int]) -> str:
        if subnet.ipv6_cidr is None:
            raise invalid_value(f"Subnet {subnet.subnet_id} has no IPv6 CIDR block")
        net = aligned_prefix(prefix, ipaddress.IPv6Network, IPV6_PREFIX_LEN, subnet.ipv6_cidr,
                             "the subnet's IPv6 range")
        if not self._v6_block_free(subnet, ipv6_block(str(net)), taken_blocks):
            raise invalid_value(f"Prefix {prefix} overlaps addresses in use or reserved")
        return str(net)

    def plan_ipv6(self, eni: Eni, subnet: Subnet, addresses: list[str], count: int | None,
                  prefixes: list[str], prefix_count: int | None, limit: int) -> AssignPlan:
        """The IPv6 addresses and /80s to give `eni`: EC2's checks, then picks for counts."""
        if addresses and count:
            raise Ec2Error("InvalidParameterCombination",
                           "Specify either IPv6 addresses or an IPv6 address count, not both")
        if prefixes and prefix_count:
            raise Ec2Error("InvalidParameterCombination",
                           "Specify either Ipv6Prefixes or Ipv6PrefixCount, not both")
        for n in (count, prefix_count):
            if n is not None and n < 0:
                raise invalid_value(f"Invalid value '{n}' for count")
        if subnet.ipv6_cidr is None:
            raise invalid_value(f"Subnet {subnet.subnet_id} has no IPv6 CIDR block: "
                                "associate one before assigning IPv6 addresses")
        plan = AssignPlan(eni.eni_id)
        taken: set[int] = set()
        taken_blocks: set[int] = set()
        delegated = self._v6_delegated.get(subnet.subnet_id, set())
        for raw in addresses:
            value = subnet.check_ipv6(raw)
            ip = str(ipaddress.IPv6Address(value))
            if value in taken:
                raise invalid_value(f"Address {ip} is specified more than once")
            taken.add(value)
            holder = self.ip_owner(eni.vpc_id, ip)
            if holder == eni.eni_id:
                raise invalid_value(f"Address {ip} is already assigned to {eni.eni_id}")
            if holder is not None:
                raise invalid_value(f"Address {ip} is in use.")
            if value >> IPV6_HOST_BITS in delegated:
                raise invalid_value(f"Address {ip} is in use by an ipv6 prefix.")
            plan.ips.append(ip)
            taken_blocks.add(value >> IPV6_HOST_BITS)
        for p in prefixes:
            checked = self.check_ipv6_prefix(subnet, p, taken_blocks)
            plan.prefixes.append(checked)
            taken_blocks.add(ipv6_block(checked))
        wanted = len(addresses) + (count or 0) + len(prefixes) + (prefix_count or 0)
        if eni.ipv6_slots + wanted > limit:
            raise invalid_value(f"Address count {eni.ipv6_slots + wanted} per interface "
                                f"exceeds the IPv6 limit ({limit}) of {eni.eni_id}")
        if count:
            plan.ips += self.pick_ipv6s(subnet, count, taken)
            taken_blocks.update(int(ipaddress.IPv6Address(i)) >> IPV6_HOST_BITS
                                for i in plan.ips)
        if prefix_count:
            plan.prefixes += self.pick_ipv6_prefixes(subnet, prefix_count, taken_blocks)
        return plan

    def plan_assign_ipv6(self, eni_id: str | None, addresses: list[str], count: int | None,
                         prefixes: list[str], prefix_count: int | None) -> AssignPlan:
        eni = self.eni(eni_id)
        if not (addresses or count or prefixes or prefix_count):
            raise Ec2Error("MissingParameter",
                           "Either 'ipv6Addresses', 'ipv6AddressCount', 'Ipv6Prefix' or "
                           "'Ipv6PrefixCount' must be specified")
        return self.plan_ipv6(eni, self.subnet(eni.subnet_id), addresses, count, prefixes,
                              prefix_count, self.eni_limits(eni).ipv6_per_eni)

    def apply_assign_ipv6(self, plan: AssignPlan) -> None:
        eni = self.enis[plan.eni_id]
        self.put_eni(replace(eni, ipv6s=eni.ipv6s + tuple(plan.ips),
                             ipv6_prefixes=eni.ipv6_prefixes + tuple(plan.prefixes)))
        self.changed()

    def plan_unassign_ipv6(self, eni_id: str | None, addresses: list[str],
                           prefixes: list[str]) -> tuple[Eni, list[str], list[str]]:
        """The ENI and the addresses and prefixes to take from it, normalised; refused
        whole when any is not on it."""
        eni = self.eni(eni_id)
        if not addresses and not prefixes:
            raise Ec2Error("MissingParameter",
                           "Either 'ipv6Addresses' or 'Ipv6Prefix' must be specified")
        ips, nets = [], []
        for raw in addresses:
            try:
                ips.append(str(ipaddress.IPv6Address(raw)))
            except ValueError:
                raise invalid_value(f"Invalid value '{raw}' for IPv6 address") from None
        for raw in prefixes:
            try:
                nets.append(str(ipaddress.IPv6Network(raw, strict=True)))
            except ValueError:
                raise invalid_value(f"Invalid value '{raw}' for ipv6 prefix") from None
        if any(ip not in eni.ipv6s for ip in ips):
            raise invalid_value(
                f"Some of the specified addresses are not assigned to interface {eni.eni_id}")
        if any(p not in eni.ipv6_prefixes for p in nets):
            raise invalid_value(
                f"Some of the specified prefixes are not assigned to interface {eni.eni_id}")
        return eni, ips, nets

    def apply_unassign_ipv6(self, eni_id: str, ips: list[str], prefixes: list[str]) -> None:
        eni = self.enis[eni_id]
        self.put_eni(replace(eni, ipv6s=tuple(i for i in eni.ipv6s if i not in ips),
                             ipv6_prefixes=tuple(p for p in eni.ipv6_prefixes
                                                 if p not in prefixes)))
        self.changed()

    # -- plans ----------------------------------------------------------------------------

    def plan_assign(self, eni_id: str | None, ips: list[str], count: int | None,
                    prefixes: list[str], prefix_count: int | None,
                    allow_reassignment: bool) -> AssignPlan:
        eni = self.eni(eni_id)
        subnet = self.subnet(eni.subnet_id)
        if ips and count:
            raise Ec2Error("InvalidParameterCombination",
                           "Specify either private IP addresses or a secondary address count, not both")
        if prefixes and prefix_count:
            raise Ec2Error("InvalidParameterCombination",
                           "Specify either Ipv4Prefixes or Ipv4PrefixCount, not both")
        if not (ips or count or prefixes or prefix_count):
            raise Ec2Error("MissingParameter",
                           "Either 'privateIpAddresses' or 'secondaryPrivateIpAddressCount' must be specified")
        for n in (count, prefix_count):
            if n is not None and n < 0:
                raise invalid_value(f"Invalid value '{n}' for count")
        wanted = len(ips) + (count or 0) + len(prefixes) + (prefix_count or 0)
        plan = AssignPlan(eni.eni_id)
        moving_out = 0
        taken: set[int] = set()
        for ip in ips:
            value = subnet.check_address(ip)
            if value in taken:
                raise invalid_value(f"Address {ip} is specified more than once")
            taken.add(value)
            holder = self.ip_owner(eni.vpc_id, ip)
            if holder == eni.eni_id:
                raise invalid_value(f"Address {ip} is already assigned to {eni.eni_id}")
            if holder is not None:
                other = self.enis[holder]
                if not allow_reassignment or other.primary_ip == ip:
                    raise invalid_value(f"Address {ip} is in use.")
                plan.moves[ip] = holder
                moving_out += 1
            elif value in self._used.get(subnet.subnet_id, set()):
                raise invalid_value(f"Address {ip} is in use by an ipv4 prefix.")
            plan.ips.append(ip)
        for p in prefixes:
            plan.prefixes.append(self.check_prefix(subnet, p, taken))
            taken.update(prefix_addresses(p))
        if eni.slots + wanted > self.eni_limits(eni).ipv4_per_eni:
            raise Ec2Error("PrivateIpAddressLimitExceeded",
                           "Number of private addresses will exceed limit.")
        if count:
            plan.ips += self.pick_ips(subnet, count, taken)
            taken.update(int(ipaddress.IPv4Address(i)) for i in plan.ips)
        if prefix_count:
            plan.prefixes += self.pick_prefixes(subnet, prefix_count, taken)
        return plan

    def apply_assign(self, plan: AssignPlan) -> None:
        for ip, holder in plan.moves.items():
            other = self.enis[holder]
            self.put_eni(replace(other, ips=tuple(i for i in other.ips if i != ip)))
        eni = self.enis[plan.eni_id]
        self.put_eni(replace(eni, ips=eni.ips + tuple(plan.ips),
                             prefixes=eni.prefixes + tuple(plan.prefixes)))
        self.changed()

    def plan_unassign(self, eni_id: str | None, ips: list[str], prefixes: list[str]) -> Eni:
        eni = self.eni(eni_id)
        if not ips and not prefixes:
            raise Ec2Error("MissingParameter",
                           "Either 'privateIpAddresses' or 'ipv4Prefixes' must be specified")
        for ip in ips:
            if ip == eni.primary_ip:
                raise invalid_value(f"The primary private IP address {ip} cannot be unassigned")
            if ip not in eni.ips:
                raise invalid_value(
                    f"Some of the specified addresses are not assigned to interface {eni.eni_id}")
        for p in prefixes:
            if p not in eni.prefixes:
                raise invalid_value(
                    f"Some of the specified prefixes are not assigned to interface {eni.eni_id}")
        return eni

    def apply_unassign(self, eni_id: str, ips: list[str], prefixes: list[str]) -> None:
        eni = self.enis[eni_id]
        self.put_eni(replace(eni, ips=tuple(i for i in eni.ips if i not in ips),
                             prefixes=tuple(p for p in eni.prefixes if p not in prefixes)))
        self.changed()

    def plan_new_eni(self, subnet_id: str | None, primary: str | None, secondaries: list[str],
                     count: int | None, prefixes: list[str],
                     prefix_count: int | None) -> tuple[Subnet, list[str], list[str]]:
        """Addresses for a new ENI (CreateNetworkInterface, RunInstances): primary first.
        In an IPv6-only subnet none: the ENI has IPv6 addresses alone."""
        subnet = self.subnet(subnet_id)
        if subnet.cidr is None:
            if primary or secondaries or count or prefixes or prefix_count:
                raise invalid_value(f"Subnet {subnet.subnet_id} is IPv6-only: an interface in "
                                    "it has no IPv4 address")
            return subnet, [], []
        taken: set[int] = set()
        ips: list[str] = []
        for ip in ([primary] if primary else []) + secondaries:
            value = subnet.check_address(ip)
            if value in taken or self.ip_owner(subnet.vpc_id, ip) or \
                    value in self._used.get(subnet.subnet_id, set()):
                raise Ec2Error("InvalidIPAddress.InUse", f"Address {ip} is in use.")
            taken.add(value)
            ips.append(ip)
        checked = []
        for p in prefixes:
            checked.append(self.check_prefix(subnet, p, taken))
            taken.update(prefix_addresses(p))
        want = len(ips) + (0 if primary else 1) + (count or 0) + len(checked) + (prefix_count or 0)
        if want > UNATTACHED.ipv4_per_eni:
            raise Ec2Error("PrivateIpAddressLimitExceeded",
                           "Number of private addresses will exceed limit.")
        extra = self.pick_ips(subnet, (0 if primary else 1) + (count or 0), taken)
        if not primary:
            ips.insert(0, extra.pop(0))
        ips += extra
        taken.update(int(ipaddress.IPv4Address(i)) for i in ips)
        if prefix_count:
            checked += self.pick_prefixes(subnet, prefix_count, taken)
        return subnet, ips, checked

    def plan_launch(self, subnet_id: str | None, az: str | None, asked: str | None,
                    secondary: int, count: int,
                    limits: InstanceLimits) -> tuple[Subnet, list[list[str]]]:
        """Addresses for the primary ENIs of `count` new instances (RunInstances), each
        primary first: in the subnet given, else the default one of `az`."""
        if not subnet_id:
            default = self.default_subnet(az)
            if default is None:
                raise Ec2Error("MissingInput", "No subnet given and no default subnet found")
            subnet_id = default.subnet_id
        subnet = self.subnet(subnet_id)
        if asked and count > 1:
            raise invalid_value("A private IP address can only be given for one instance")
        if 1 + secondary > limits.ipv4_per_eni:
            raise Ec2Error("PrivateIpAddressLimitExceeded",
                           "Number of private addresses will exceed limit.")
        plans = []
        taken: set[int] = set()
        for _ in range(count):
            if asked:
                _, ips, _ = self.plan_new_eni(subnet.subnet_id, asked, [], secondary, [], None)
            else:  # one pick for all, so two instances of one call never share an address
                ips = self.pick_ips(subnet, 1 + secondary, taken)
            taken.update(int(ipaddress.IPv4Address(i)) for i in ips)
            plans.append(ips)
        return subnet, plans

    def apply_launch(self, inst: InstanceState, enis: Iterable[Eni]) -> None:
        self.put_instance(inst)
        for eni in enis:
            self.put_eni(eni)
        self.changed()

    def mark_terminated(self, instance_id: str) -> None:
        """The instance stays known (as EC2 shows it for a while); its ENIs change apart."""
        self.put_instance(replace(self.instances[instance_id], state="terminated"))

    def plan_attach(self, eni_id: str | None, instance_id: str | None,
                    device_index: int | None, card: int = 0) -> tuple[Eni, InstanceState]:
        """Device indexes are per network card (a card's device 1 and another's are two
        slots), and so are ENI limits, besides the instance's own. A card the type does not
        have is InvalidParameterValue, as for any value out of range."""
        eni = self.eni(eni_id)
        inst = self.instance(instance_id)
        if device_index is None or device_index < 0:
            raise invalid_value(f"Invalid value '{device_index}' for deviceIndex")
        limits = self.limits_for(inst.instance_type) or UNATTACHED
        if not 0 <= card < len(limits.card_limits):
            raise invalid_value(f"Invalid value '{card}' for NetworkCardIndex: "
                                f"{inst.instance_type} has {len(limits.card_limits)} "
                                "network card(s).")
        if eni.attachment is not None:
            raise Ec2Error("InvalidNetworkInterface.InUse", f"Interface: [{eni.eni_id}] in use.")
        trunks.check_attach(self, eni, inst)
        attached = self.instance_enis(inst.instance_id)
        on_card = [e for e in attached if e.attachment.network_card_index == card]
        if any(e.attachment.device_index == device_index for e in on_card):
            raise invalid_value(
                f"Instance '{inst.instance_id}' already has an interface attached at "
                f"device index '{device_index}'.")
        for count, most in ((len(on_card), limits.card_limits[card]),
                            (len(attached), limits.max_enis)):
            if count + 1 > most:
                raise Ec2Error("AttachmentLimitExceeded",
                               f"Interface count {count + 1} exceeds the limit for "
                               f"{inst.instance_type}")
        if eni.slots > limits.ipv4_per_eni:
            raise Ec2Error("PrivateIpAddressLimitExceeded",
                           "Number of private addresses will exceed limit.")
        return eni, inst

    def plan_detach(self, attachment_id: str | None) -> Eni:
        eni = self.eni_by_attachment(attachment_id or "")
        if eni is None:
            raise Ec2Error("InvalidAttachmentID.NotFound",
                           f"The attachment ID '{attachment_id}' does not exist")
        if eni.attachment.status == "attaching":
            raise Ec2Error("IncorrectState",
                           f"Interface: [{eni.eni_id}] is attaching; it cannot be detached yet.")
        if eni.attachment.device_index == 0:
            raise Ec2Error("OperationNotPermitted",
                           "The network interface at device index 0 cannot be detached.")
        return eni

    def plan_delete(self, eni_id: str | None) -> Eni:
        """What real EC2 answers Delete of an attached, attaching or detaching ENI:
        InvalidParameterValue "... is currently in use." (seen in upstream #1399 and in
        cloud-nuke #431/#1132's logs; InvalidNetworkInterface.InUse is Attach's and
        RunInstances' code for an ENI attached elsewhere, not Delete's)."""
        eni = self.eni(eni_id)
        if eni.attachment is not None:
            raise invalid_value(f"Network interface '{eni.eni_id}' is currently in use.")
        return eni

    def apply_new_eni(self, eni: Eni) -> None:
        self.put_eni(eni)
        self.changed()

    def apply_delete(self, eni_id: str) -> None:
        self.pending.pop(eni_id, None)
        trunks.drop_eni(self, eni_id)
        self.drop_eni(eni_id)
        self.changed()

    def set_attachment(self, eni_id: str, attachment: Attachment | None) -> None:
        self.pending.pop(eni_id, None)
        self.put_eni(replace(self.enis[eni_id], attachment=attachment))
        self.changed()

    def set_attachment_status(self, eni_id: str, attachment: Attachment, status: str) -> None:
        """An attach or detach that takes time: `attachment` shown with `status` ("attaching",
        "detaching") until `settle_attachment`."""
        held = replace(attachment, status=status)
        self.pending[eni_id] = held
        self.put_eni(replace(self.enis[eni_id], attachment=held))
        self.changed()

    def settle_attachment(self, eni_id: str, attachment_id: str) -> bool:
        """The pending attach or detach of `attachment_id` completes: attaching becomes
        attached, detaching becomes no attachment (the ENI is available). False when it is no
        longer pending (the ENI was deleted, the mirror reloaded without it)."""
        held = self.pending.get(eni_id)
        if held is None or held.attachment_id != attachment_id or eni_id not in self.enis:
            return False
        done = replace(held, status="attached") if held.status == "attaching" else None
        self.set_attachment(eni_id, done)
        return True

    # -- ownership ------------------------------------------------------------------------

    def snapshot(self) -> OwnershipSnapshot:
        """Built once per change of this region; a change elsewhere only restamps the version."""
        snap = self._snapshot
        shared = self.versions
        if snap is None:
            snap = build_snapshot(shared.value, self.enis, self.region, shared.regions,
                                  self.associations)
        elif snap.version != shared.value or snap.regions != shared.regions:
            snap = replace(snap, version=shared.value, regions=shared.regions)
        self._snapshot = snap
        return snap


def aligned_prefix(prefix: str, network, prefixlen: int, within, range_words: str):
    """A delegated prefix as EC2 takes it: aligned, of `prefixlen`, inside `within` (the
    subnet's block, `range_words` in the refusal), else InvalidParameterValue."""
    family = "ipv6" if network is ipaddress.IPv6Network else "ipv4"
    try:
        block = network(prefix, strict=True)
    except ValueError:
        raise invalid_value(f"Invalid value '{prefix}' for {family} prefix: not an aligned "
                            f"/{prefixlen}") from None
    if block.prefixlen != prefixlen:
        raise invalid_value(f"Invalid value '{prefix}' for {family} prefix: must be a "
                            f"/{prefixlen}")
    if not block.subnet_of(within):
        raise invalid_value(f"Prefix {prefix} does not fall within {range_words}")
    return block


def ipv6_block(prefix: str) -> int:
    """The /80 block a prefix or address lies in, as an index (its top 80 bits)."""
    return int(ipaddress.IPv6Network(prefix, strict=False).network_address) >> IPV6_HOST_BITS


def ipv6_prefix_of(block: int) -> str:
    return str(ipaddress.IPv6Network((block << IPV6_HOST_BITS, IPV6_PREFIX_LEN)))


def check_launch_count(min_count: int, count: int) -> None:
    """RunInstances' MinCount and MaxCount, as EC2 accepts them."""
    if count < 1 or min_count < 1 or min_count > count:
        raise invalid_value(f"Invalid MinCount {min_count} / MaxCount {count}")


def select_enis(enis: dict[str, Eni], ids: list[str]) -> list[Eni]:
    """The ENIs named (each once, in the order first named), or all of them when none is;
    an unknown one refuses the whole call, as EC2's Describe does."""
    if not ids:
        return list(enis.values())
    missing_ids = [i for i in ids if i not in enis]
    if missing_ids:
        raise eni_not_found(missing_ids[0])
    return [enis[i] for i in dict.fromkeys(ids)]
