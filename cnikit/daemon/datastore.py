"""The daemon's third view: ENIs, their /32 IPs or /28 prefixes, and which sandbox holds each IP.

Mirrors upstream's datastore model (ENI -> CIDR -> address, keyed by the CNI's primary
key (network name, container id, ifname)) and its checkpoint rows. Every change of an
assignment is checkpointed before it is visible to the caller; a failed write undoes it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field

from cnikit.daemon.clock import Clock, from_wall_ns, to_wall_ns


class DatastoreError(Exception):
    pass


class NoAvailableIP(DatastoreError):
    pass


class InUse(DatastoreError):
    pass


@dataclass(frozen=True)
class IpamKey:
    network: str
    container_id: str
    if_name: str

    def __str__(self) -> str:
        return f"{self.network}/{self.container_id}/{self.if_name}"


@dataclass
class Address:
    ip: str
    key: IpamKey | None = None
    metadata: dict = field(default_factory=dict)
    assigned_ns: int = 0
    unassigned_at: float | None = None

    @property
    def assigned(self) -> bool:
        return self.key is not None


@dataclass
class Cidr:
    cidr: str  # "10.0.1.7/32" or "10.0.1.16/28"
    is_prefix: bool
    addresses: dict[str, Address] = field(default_factory=dict)

    def hosts(self) -> Iterator[str]:
        """Every address, lowest first, made as asked: an IPv6 /80 has 2**48 of them."""
        net = ipaddress.ip_network(self.cidr, strict=False)
        return (str(a) for a in net)

    @property
    def size(self) -> int:
        return ipaddress.ip_network(self.cidr, strict=False).num_addresses

    def assigned(self) -> list[Address]:
        return [a for a in self.addresses.values() if a.assigned]


@dataclass
class Eni:
    eni_id: str
    device_number: int
    is_primary: bool
    primary_ip: str
    mac: str
    created_at: float
    cidrs: dict[str, Cidr] = field(default_factory=dict)

    def addresses(self):
        for c in self.cidrs.values():
            yield from c.addresses.values()

    def assigned_count(self) -> int:
        return sum(1 for a in self.addresses() if a.assigned)

    def ips(self) -> list[str]:
        return [c.cidr.split("/")[0] for c in self.cidrs.values() if not c.is_prefix]

    def prefixes(self) -> list[str]:
        return [c.cidr for c in self.cidrs.values() if c.is_prefix]


@dataclass(frozen=True)
class Assignment:
    ip: str
    eni_id: str
    device_number: int
    key: IpamKey


@dataclass(frozen=True)
class Stats:
    total: int
    assigned: int
    cooldown: int
    prefixes: int
    enis: int

    @property
    def available(self) -> int:
        """Free now: neither held by a pod nor cooling down."""
        return self.total - self.assigned - self.cooldown


def host_cidr(ip: str) -> str:
    return f"{ip}/128" if ":" in ip else f"{ip}/32"


def row_ip(row: dict) -> str | None:
    """A checkpoint row's address: upstream writes an IPv4 pod's as `ipv4`, an IPv6 pod's
    as `ipv6`."""
    return row.get("ipv4") or row.get("ipv6")


class Datastore:
    def __init__(self, clock: Clock, ip_cooldown: float, checkpoint=None):
        self.clock = clock
        self.ip_cooldown = ip_cooldown
        self.checkpoint = checkpoint
        self.enis: dict[str, Eni] = {}
        self._by_key: dict[IpamKey, tuple[str, str, str]] = {}  # key -> (eni, cidr, ip)
        # CIDRs never to hand out again (EC2 no longer has them), kept only for their holders.
        self.quarantined: set[str] = set()
        # Checkpointed pods whose address no ENI of the node has (EC2 took it while the
        # pod held it, and the daemon restarted): kept for the pod, in the checkpoint, off
        # every ENI, until its DEL or until the address comes back (ip -> checkpoint row).
        self.lost: dict[str, dict] = {}
        # IP cooldowns recalled from the checkpoint after a restart (ip -> monotonic DEL
        # time), for addresses whose Address was built anew without one.
        self.recalled: dict[str, float] = {}

    # ---- ENIs and CIDRs -------------------------------------------------------------

    def add_eni(self, eni_id: str, device_number: int, is_primary: bool, primary_ip: str = "",
                mac: str = "") -> Eni:
        if eni_id in self.enis:
            raise DatastoreError(f"duplicate ENI {eni_id}")
        eni = Eni(eni_id, device_number, is_primary, primary_ip, mac, self.clock.now())
        self.enis[eni_id] = eni
        return eni

    def add_cidr(self, eni_id: str, cidr: str, is_prefix: bool) -> bool:
        """Add an IP (/32) or prefix (/28). False when it is already in the store."""
        eni = self._eni(eni_id)
        if "/" not in cidr:
            cidr = host_cidr(cidr)
        for other in self.enis.values():
            if cidr in other.cidrs:
                if other is eni:
                    return False
                raise DatastoreError(f"{cidr} is already on {other.eni_id}")
        c = Cidr(cidr, is_prefix)
        if not is_prefix:
            ip = cidr.split("/")[0]
            c.addresses[ip] = Address(ip)
        eni.cidrs[cidr] = c
        return True

    def del_cidr(self, eni_id: str, cidr: str, force: bool = False) -> list[IpamKey]:
        """Remove an IP or prefix. With force, pods holding it lose it: their keys are returned."""
        eni = self._eni(eni_id)
        if "/" not in cidr:
            cidr = host_cidr(cidr)
        c = eni.cidrs.get(cidr)
        if c is None:
            raise DatastoreError(f"unknown {cidr} on {eni_id}")
        evicted = [a.key for a in c.assigned()]
        if evicted and not force:
            raise InUse(f"{cidr} on {eni_id} is held by {evicted[0]}")
        del eni.cidrs[cidr]
        for key in evicted:
            self._by_key.pop(key, None)
        if evicted:
            self._persist()
        return evicted

    def remove_eni(self, eni_id: str, force: bool = False) -> list[IpamKey]:
        eni = self._eni(eni_id)
        evicted = [a.key for a in eni.addresses() if a.assigned]
        if evicted and not force:
            raise InUse(f"{eni_id} has {len(evicted)} IPs held by pods")
        del self.enis[eni_id]
        for key in evicted:
            self._by_key.pop(key, None)
        if evicted:
            self._persist()
        return evicted

    def _eni(self, eni_id: str) -> Eni:
        try:
            return self.enis[eni_id]
        except KeyError:
            raise DatastoreError(f"unknown ENI {eni_id}") from None

    # ---- assignments ------------------------------------------------------------------

    def cooling(self, addr: Address) -> bool:
        t = addr.unassigned_at if addr.unassigned_at is not None else self.recalled.get(addr.ip)
        return not addr.assigned and t is not None and self.clock.now() - t <= self.ip_cooldown

    def recall_cooling(self, deleted_ns: dict[str, int]) -> None:
        """IP cooldowns a previous process of this daemon checkpointed (address -> wall ns of
        its pod's DEL): a restart must not hand a just-freed address to the next pod."""
        now = self.clock.now()
        for ip, ns in deleted_ns.items():
            t = from_wall_ns(self.clock, ns)
            if now - t <= self.ip_cooldown:
                self.recalled[ip] = t

    def _cooling_wall_ns(self) -> dict[str, int]:
        """What is cooling now (recalled ones included), for the checkpoint; drops the
        recalled cooldowns that are over."""
        now = self.clock.now()
        self.recalled = {ip: t for ip, t in self.recalled.items() if now - t <= self.ip_cooldown}
        out = dict(self.recalled)
        for eni in self.enis.values():
            for a in eni.addresses():
                if a.unassigned_at is not None and self.cooling(a):
                    out[a.ip] = a.unassigned_at
        return {ip: to_wall_ns(self.clock, t) for ip, t in out.items()}

    def find(self, key: IpamKey) -> Assignment | None:
        where = self._by_key.get(key)
        if where is None:
            return None
        eni_id, _, ip = where
        eni = self.enis[eni_id]
        return Assignment(ip, eni_id, eni.device_number, key)

    def metadata(self, key: IpamKey) -> dict:
        where = self._by_key.get(key)
        if where is None:
            return {}
        eni_id, cidr, ip = where
        return dict(self.enis[eni_id].cidrs[cidr].addresses[ip].metadata)

    def holder(self, ip: str) -> IpamKey | None:
        for eni in self.enis.values():
            for a in eni.addresses():
                if a.ip == ip and a.assigned:
                    return a.key
        return None

    def assign(self, key: IpamKey, metadata: dict | None = None) -> Assignment:
        """Give key an IP (the same one again if it already has one). Checkpointed first."""
        existing = self.find(key)
        if existing is not None:
            return existing
        eni, cidr, addr = self._pick()
        created = addr.ip not in cidr.addresses
        cidr.addresses[addr.ip] = addr
        prev = (addr.key, addr.metadata, addr.assigned_ns)
        addr.key, addr.metadata, addr.assigned_ns = key, dict(metadata or {}), self.clock.wall_ns()
        self._by_key[key] = (eni.eni_id, cidr.cidr, addr.ip)
        try:
            self._persist()
        except Exception:
            # The caller never saw this IP: put everything back as it was.
            addr.key, addr.metadata, addr.assigned_ns = prev
            del self._by_key[key]
            if created:
                del cidr.addresses[addr.ip]
            raise
        return Assignment(addr.ip, eni.eni_id, eni.device_number, key)

    def _pick(self) -> tuple[Eni, Cidr, Address]:
        best = None
        for eni in sorted(self.enis.values(), key=lambda e: e.device_number):
            # Prefixes already in use first, so free prefixes stay whole and can be released.
            cidrs = sorted(eni.cidrs.values(), key=lambda c: (not c.assigned(), c.cidr))
            for c in cidrs:
                if c.cidr in self.quarantined:
                    continue
                if c.is_prefix and ":" in c.cidr:
                    found = self._pick_ipv6(c)
                    if found is not None:
                        return eni, c, found
                elif c.is_prefix:
                    for ip in c.hosts():
                        a = c.addresses.get(ip)
                        if a is None:
                            a = Address(ip)
                            if not self.cooling(a):  # recalled after a restart
                                return eni, c, a
                            continue
                        if not a.assigned and not self.cooling(a):
                            if a.unassigned_at is None:
                                return eni, c, a
                            if best is None or a.unassigned_at < best[2].unassigned_at:
                                best = (eni, c, a)
                else:
                    for a in c.addresses.values():
                        if not a.assigned and not self.cooling(a):
                            if a.unassigned_at is None:
                                return eni, c, a
                            if best is None or a.unassigned_at < best[2].unassigned_at:
                                best = (eni, c, a)
        if best is None:
            raise NoAvailableIP("no available IP/prefix addresses")
        return best

    def _pick_ipv6(self, c: Cidr) -> Address | None:
        """Upstream's getUnusedIP for an IPv6 prefix: a released address out of its cooldown
        first (the longest released), else the next unused one up from the prefix base."""
        free = [a for a in c.addresses.values() if not a.assigned and not self.cooling(a)]
        if free:
            return min(free, key=lambda a: a.unassigned_at or 0.0)
        for ip in c.hosts():
            if ip not in c.addresses and ip not in self.recalled:
                return Address(ip)
        return None

    def unassign(self, key: IpamKey) -> Assignment | None:
        """Release key's IP into cooldown. None when key holds nothing (DEL is idempotent)."""
        where = self._by_key.get(key)
        if where is None:
            self._forget_lost(key)
            return None
        eni_id, cidr, ip = where
        eni = self.enis[eni_id]
        addr = eni.cidrs[cidr].addresses[ip]
        prev = (addr.key, addr.metadata, addr.assigned_ns, addr.unassigned_at)
        addr.key, addr.metadata, addr.assigned_ns = None, {}, 0
        addr.unassigned_at = self.clock.now()
        del self._by_key[key]
        try:
            self._persist()
        except Exception:
            addr.key, addr.metadata, addr.assigned_ns, addr.unassigned_at = prev
            self._by_key[key] = where
            raise
        return Assignment(ip, eni_id, eni.device_number, key)

    def _forget_lost(self, key: IpamKey) -> None:
        """DEL of a pod whose address is away: nothing to free, its record goes."""
        gone = [ip for ip, r in self.lost.items()
                if (r.get("containerID"), r.get("ifName", "")) == (key.container_id, key.if_name)]
        for ip in gone:
            del self.lost[ip]
        if gone:
            self._persist()

    def assignments(self) -> list[Assignment]:
        return [self.find(k) for k in list(self._by_key)]

    # ---- pool questions ---------------------------------------------------------------

    def stats(self) -> Stats:
        total = assigned = cooldown = prefixes = 0
        for eni in self.enis.values():
            for c in eni.cidrs.values():
                if c.cidr in self.quarantined and not c.assigned():
                    continue  # not to hand out: the pool must not count on it
                total += c.size
                prefixes += c.is_prefix
                for a in c.addresses.values():
                    if a.assigned:
                        assigned += 1
                    elif self.cooling(a):
                        cooldown += 1
        return Stats(total, assigned, cooldown, prefixes, len(self.enis))

    def addresses(self) -> set[str]:
        """Every IP and prefix in the store, as EC2 writes them (no /32)."""
        return {c.cidr.removesuffix("/32").removesuffix("/128")
                for e in self.enis.values() for c in e.cidrs.values()}

    def cidr_is_free(self, c: Cidr) -> bool:
        return all(not a.assigned and not self.cooling(a) for a in c.addresses.values())

    def free_cidrs(self, prefixes: bool) -> list[tuple[str, str]]:
        """(eni_id, cidr) that nobody holds and that are out of cooldown: safe to release."""
        out = []
        for eni in sorted(self.enis.values(), key=lambda e: -e.device_number):
            for c in eni.cidrs.values():
                if c.is_prefix == prefixes and self.cidr_is_free(c) and c.cidr not in self.quarantined:
                    out.append((eni.eni_id, c.cidr))
        return out

    def deletable_enis(self, min_lifetime: float) -> list[str]:
        now = self.clock.now()
        out = []
        for eni in sorted(self.enis.values(), key=lambda e: -e.device_number):
            if eni.is_primary or now - eni.created_at < min_lifetime:
                continue
            if any(a.assigned or self.cooling(a) for a in eni.addresses()):
                continue
            out.append(eni.eni_id)
        return out

    # ---- checkpoint -------------------------------------------------------------------

    def rows(self) -> list[dict]:
        rows = []
        for eni in self.enis.values():
            for c in eni.cidrs.values():
                for a in c.addresses.values():
                    if a.assigned:
                        rows.append({
                            "networkName": a.key.network,
                            "containerID": a.key.container_id,
                            "ifName": a.key.if_name,
                            ("ipv6" if ":" in a.ip else "ipv4"): a.ip,
                            "allocationTimestamp": a.assigned_ns,
                            "metadata": a.metadata,
                        })
        rows += [r for ip, r in self.lost.items() if not self.holds_ip(ip)]
        rows.sort(key=lambda r: (r["containerID"], r["ifName"]))
        return rows

    def holds_ip(self, ip: str) -> bool:
        return any(a.ip == ip and a.assigned for eni in self.enis.values()
                   for c in eni.cidrs.values() for a in c.addresses.values())

    def _persist(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.write(self.rows(), self._cooling_wall_ns())

    def restore(self, rows: list[dict]) -> tuple[list[dict], list[dict]]:
        """Re-assign checkpointed rows onto the ENIs/CIDRs already loaded.

        Returns (recovered, dropped): rows whose IP is on no known ENI are dropped, as
        upstream does ("presuming stale/dead"). The checkpoint is rewritten.
        """
        recovered, dropped = [], []
        for row in rows:
            try:
                key = IpamKey(row.get("networkName", ""), row["containerID"], row.get("ifName", ""))
                ip = row_ip(row)
                target = ipaddress.ip_address(ip)
            except (KeyError, TypeError, ValueError):
                dropped.append(row)
                continue
            placed = False
            for eni in self.enis.values():
                for c in eni.cidrs.values():
                    if target in ipaddress.ip_network(c.cidr, strict=False):
                        addr = c.addresses.setdefault(ip, Address(ip))
                        if addr.assigned or key in self._by_key:
                            break
                        addr.key, addr.metadata = key, dict(row.get("metadata") or {})
                        addr.assigned_ns = int(row.get("allocationTimestamp") or 0)
                        self._by_key[key] = (eni.eni_id, c.cidr, ip)
                        placed = True
                        break
                if placed:
                    break
            (recovered if placed else dropped).append(row)
        self._persist()
        return recovered, dropped

    # ---- introspection (upstream's /v1/enis shape) ------------------------------------

    def introspect(self) -> dict:
        s = self.stats()
        enis = {}
        for eni in self.enis.values():
            cidrs = {}
            for c in eni.cidrs.values():
                cidrs[c.cidr] = {
                    "Cidr": c.cidr,
                    "IsPrefix": c.is_prefix,
                    "IPAddresses": {
                        a.ip: {
                            "Address": a.ip,
                            "IPAMKey": ({"networkName": a.key.network, "containerID": a.key.container_id,
                                         "ifName": a.key.if_name} if a.key else
                                        {"networkName": "", "containerID": "", "ifName": ""}),
                            "IPAMMetadata": a.metadata,
                            "AssignedTime": a.assigned_ns,
                            "Cooling": self.cooling(a),
                        }
                        for a in c.addresses.values()
                    },
                }
            enis[eni.eni_id] = {
                "ID": eni.eni_id,
                "IsPrimary": eni.is_primary,
                "DeviceNumber": eni.device_number,
                "PrimaryIP": eni.primary_ip,
                "MAC": eni.mac,
                "AvailableIPv4Cidrs": cidrs,
            }
        return {"TotalIPs": s.total, "AssignedIPs": s.assigned, "CooldownIPs": s.cooldown,
                "ENIs": enis}
