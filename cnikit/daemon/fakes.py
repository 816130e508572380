"""In-memory EC2 and IMDS views for unit tests of the daemon's logic.

FakeEc2 is the truth (with EC2's per-ENI and per-instance limits and unique IPs);
FakeImds shows it, optionally stale per ENI (`freeze`), overridden (`override`) or
missing ENIs (`hide`), which is all the three-view bugs need.
"""

from __future__ import annotations

import copy
import ipaddress
import itertools

from cnikit.daemon.apis import ApiError, EniView, Identity, InstanceInfo, Limits, SubnetView

# EC2's DescribeInstanceTypes figures; t3a.small is outside the daemon's own table.
LIMITS = {"m5.large": Limits(3, 10), "t3.large": Limits(3, 12), "t3.small": Limits(3, 4),
          "t3a.small": Limits(2, 4)}


def _ec2_view(eni: EniView) -> EniView:
    """An ENI as EC2 describes it: the subnet's id, not its CIDR (IMDS's entry)."""
    view = copy.deepcopy(eni)
    view.subnet_cidr = ""
    return view


class FakeEc2:
    def __init__(self, subnet_cidr: str = "10.0.1.0/24", instance_type: str = "m5.large"):
        self.subnet = ipaddress.ip_network(subnet_cidr)
        self.subnet_id = "subnet-1"
        self.instance_type = instance_type
        self.enis: dict[str, EniView] = {}
        self.used: set[str] = set()
        self.calls: list[str] = []
        self.fail: dict[str, str] = {}  # method -> error code, to inject failures
        self.reuse_freed = False  # hand a released IP straight back out, lowest first (like the gate)
        # A detach takes time (the gate's slow-attachment): the ENI stays attached,
        # "detaching", until finish_detaches(); Delete answers "in use" meanwhile.
        self.slow_detach = False
        self._ids = itertools.count(1)
        hosts = list(self.subnet.hosts())[3:]  # AWS reserves the first three
        self._free = [str(h) for h in hosts]
        self._free_prefixes = [str(n) for n in self.subnet.subnets(new_prefix=28)][4:]
        self.instance_id = "i-0001"
        primary = self._new_eni()
        primary.device_index, primary.instance_id, primary.attachment_id = 0, self.instance_id, "att-0"
        self.primary = primary

    def _ip(self) -> str:
        while True:
            ip = self._free.pop(0)
            if ip not in self.used:
                self.used.add(ip)
                return ip

    def _new_eni(self) -> EniView:
        n = next(self._ids)
        ip = self._ip()
        eni = EniView(f"eni-{n:04d}", mac=f"0a:00:00:00:00:{n:02x}", primary_ip=ip, ips=[ip],
                      subnet_id=self.subnet_id, subnet_cidr=str(self.subnet))
        self.enis[eni.eni_id] = eni
        return eni

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise ApiError(f"{name} failed (injected)", self.fail[name])

    # -- Ec2Api
    def describe_instance(self, instance_id):
        self._call("describe_instance")
        return InstanceInfo(instance_id, self.instance_type, self.subnet_id, ["sg-1"],
                            self.primary.eni_id, self.primary.primary_ip)

    def instance_limits(self, instance_type):
        self._call("instance_limits")
        if instance_type not in LIMITS:
            raise ApiError(f"{instance_type} is not an instance type", "InvalidInstanceType")
        return LIMITS[instance_type]

    def describe_enis(self, instance_id):
        self._call("describe_enis")
        return [_ec2_view(e) for e in self.enis.values() if e.instance_id == instance_id]

    def describe_eni(self, eni_id):
        self._call("describe_eni")
        e = self.enis.get(eni_id)
        return _ec2_view(e) if e else None

    def describe_tagged_enis(self, tag, value):
        self._call("describe_tagged_enis")
        return [_ec2_view(e) for e in self.enis.values() if e.tags.get(tag) == value]

    def describe_subnets(self, vpc_id, az):
        self._call("describe_subnets")
        free = sum(1 for ip in self._free if ip not in self.used)
        return [SubnetView(self.subnet_id, str(self.subnet), free)]

    def create_eni(self, subnet_id, security_groups, tags, secondary_ips):
        self._call("create_eni")
        eni = self._new_eni()
        eni.tags = dict(tags)
        if secondary_ips:
            self._check_room(eni, secondary_ips)
            eni.ips += [self._ip() for _ in range(secondary_ips)]
        return _ec2_view(eni)

    def attach_eni(self, eni_id, instance_id, device_index):
        self._call("attach_eni")
        taken = {e.device_index for e in self.enis.values() if e.instance_id == instance_id}
        if device_index in taken:
            raise ApiError("device index in use", "InvalidParameterValue")
        if device_index >= LIMITS[self.instance_type].max_enis:
            raise ApiError("too many ENIs", "AttachmentLimitExceeded")
        e = self.enis[eni_id]
        e.instance_id, e.device_index, e.attachment_id = instance_id, device_index, f"att-{eni_id}"
        return e.attachment_id

    def detach_eni(self, attachment_id):
        self._call("detach_eni")
        for e in self.enis.values():
            if e.attachment_id == attachment_id:
                if self.slow_detach:
                    e.attachment_status = "detaching"
                else:
                    e.instance_id = e.device_index = e.attachment_id = None

    def finish_detaches(self) -> None:
        for e in self.enis.values():
            if e.attachment_status == "detaching":
                e.instance_id = e.device_index = e.attachment_id = e.attachment_status = None

    def delete_eni(self, eni_id):
        self._call("delete_eni")
        e = self.enis.get(eni_id)
        if e is None:
            raise ApiError("no such ENI", "InvalidNetworkInterfaceID.NotFound")
        if e.attachment_id:
            raise ApiError("ENI is attached", "InvalidParameterValue")
        for ip in e.ips:
            self.used.discard(ip)
        del self.enis[eni_id]

    def _check_room(self, eni, n):
        if len(eni.ips) + len(eni.prefixes) + n > LIMITS[self.instance_type].ipv4_per_eni:
            raise ApiError("too many addresses on the ENI", "PrivateIpAddressLimitExceeded")

    def assign_ips(self, eni_id, count):
        self._call("assign_ips")
        e = self.enis[eni_id]
        self._check_room(e, count)
        got = [self._ip() for _ in range(count)]
        e.ips += got
        return got

    def unassign_ips(self, eni_id, ips):
        self._call("unassign_ips")
        e = self.enis[eni_id]
        for ip in ips:
            if ip not in e.secondary_ips:
                raise ApiError(f"{ip} is not on {eni_id}", "InvalidParameterValue")
        for ip in ips:
            e.ips.remove(ip)
            self.used.discard(ip)
            if self.reuse_freed:
                self._free.insert(0, ip)

    def assign_prefixes(self, eni_id, count):
        self._call("assign_prefixes")
        e = self.enis[eni_id]
        self._check_room(e, count)
        got = [self._free_prefixes.pop(0) for _ in range(count)]
        e.prefixes += got
        return got

    def unassign_prefixes(self, eni_id, prefixes):
        self._call("unassign_prefixes")
        e = self.enis[eni_id]
        for p in prefixes:
            e.prefixes.remove(p)

    # A dual-stack subnet's /64, /80s handed out in order past the first (its reserved
    # addresses), as the gate does.
    ipv6_subnet = ipaddress.IPv6Network("2600:1f18:aaaa:bb00::/64")

    def assign_ipv6_prefixes(self, eni_id, count):
        self._call("assign_ipv6_prefixes")
        e = self.enis[eni_id]
        taken = {p for v in self.enis.values() for p in v.ipv6_prefixes}
        blocks = (str(b) for b in itertools.islice(self.ipv6_subnet.subnets(new_prefix=80), 1,
                                                   None))
        got = [b for b, _ in zip((b for b in blocks if b not in taken), range(count),
                                 strict=False)]
        e.ipv6_prefixes += got
        return got

    # -- test helpers
    def take_back(self, eni_id: str, ip: str) -> None:
        """Remove an IP behind the daemon's back (another actor, a console click)."""
        self.enis[eni_id].ips.remove(ip)
        self.used.discard(ip)

    def all_ips(self) -> list[str]:
        return [ip for e in self.enis.values() for ip in e.ips]


class FakeImds:
    def __init__(self, ec2: FakeEc2):
        self.ec2 = ec2
        self.frozen: dict[str, EniView] = {}
        self.overrides: dict[str, EniView] = {}
        self.hidden: set[str] = set()
        self.lingering: dict[str, EniView] = {}
        self.fail = False

    def identity(self):
        return Identity(self.ec2.instance_id, self.ec2.instance_type, self.ec2.primary.mac)

    def freeze(self, eni_id: str) -> None:
        """Hold eni_id's entries at their current values (a stale IMDS)."""
        self.frozen[eni_id] = copy.deepcopy(self.ec2.enis[eni_id])

    def thaw(self) -> None:
        self.frozen.clear()
        self.overrides.clear()
        self.hidden.clear()

    def override(self, eni_id: str, ips: list[str] | None = None,
                 prefixes: list[str] | None = None) -> None:
        v = copy.deepcopy(self.ec2.enis[eni_id])
        if ips is not None:
            v.ips = list(ips)
        if prefixes is not None:
            v.prefixes = list(prefixes)
        self.overrides[eni_id] = v

    def hide(self, eni_id: str) -> None:
        self.hidden.add(eni_id)

    def linger(self, eni_id: str) -> None:
        """Go on listing eni_id as it is now after EC2 detaches and deletes it (upstream
        #1008, AWS #2497: IMDS lists a departed ENI until the next attach or detach)."""
        self.lingering[eni_id] = copy.deepcopy(self.ec2.enis[eni_id])

    def enis(self, ipv6: bool = False):
        if self.fail:
            raise ApiError("IMDS unavailable", "ServiceUnavailable")
        out = []
        for e in self.ec2.enis.values():
            if e.instance_id != self.ec2.instance_id or e.eni_id in self.hidden:
                continue
            v = self.overrides.get(e.eni_id) or self.frozen.get(e.eni_id) or e
            out.append(copy.deepcopy(v))
        listed = {v.eni_id for v in out}
        out += [copy.deepcopy(v) for k, v in self.lingering.items() if k not in listed]
        return out
