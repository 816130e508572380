"""EC2 state -> what IMDS serves, per instance. Pure functions, no I/O.

Two stages, so faults can act on either:
  build_models(state)  -> {instance_id: InstanceMeta}   (structured, what faults edit)
  render(meta)         -> {path: body}                  (leaves only)
  serve_map(leaves)    -> {path: bytes}                 (leaves + directory listings)

Paths carry no leading slash: "latest/meta-data/instance-id".
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fault_imds.signing import sign_document

META = "latest/meta-data/"
MACS = META + "network/interfaces/macs/"
IDENTITY_DIR = "latest/dynamic/instance-identity/"
IDENTITY = IDENTITY_DIR + "document"
# What real IMDS lists at `/`: every dated API version serves the same tree as `latest`.
API_VERSIONS = (
    "1.0", "2007-01-19", "2007-03-01", "2007-08-29", "2007-10-10", "2007-12-15", "2008-02-01",
    "2008-09-01", "2009-04-04", "2011-01-01", "2011-05-01", "2012-01-12", "2014-02-25",
    "2014-11-05", "2015-10-20", "2016-04-19", "2016-06-30", "2016-09-02", "2018-03-28",
    "2018-08-17", "2018-09-24", "2019-10-01", "2020-10-27", "2021-01-03", "2021-03-23", "latest",
)  # fmt: skip
_DATED = frozenset(API_VERSIONS) - {"latest"}
# Instance profile credentials: reissued each hour, valid for six (as EC2 rotates them).
CREDENTIALS_PERIOD_S = 3600
CREDENTIALS_LIFETIME_S = 6 * 3600
# Instance states that still have a metadata service (and a caller).
LIVE_STATES = ("pending", "running", "stopping")
# The per-MAC address lists the event log follows (`served` events).
SERVED_LISTS = ("local-ipv4s", "ipv4-prefix", "ipv6s", "ipv6-prefix")


@dataclass(frozen=True)
class EniMeta:
    eni_id: str
    mac: str
    device_number: int
    network_card_index: int
    local_ipv4s: tuple[str, ...]  # primary first
    ipv4_prefixes: tuple[str, ...]
    subnet_id: str
    subnet_cidr: str
    vpc_id: str
    vpc_cidrs: tuple[str, ...]  # primary block first
    sg_ids: tuple[str, ...]
    sg_names: tuple[str, ...]
    owner_id: str
    local_hostname: str
    ipv6s: tuple[str, ...] = ()
    ipv6_prefixes: tuple[str, ...] = ()
    subnet_ipv6_cidrs: tuple[str, ...] = ()  # associated blocks only
    vpc_ipv6_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class InstanceMeta:
    instance_id: str
    instance_type: str
    ami_id: str
    az: str
    region: str
    local_ipv4: str
    local_hostname: str
    mac: str  # the primary ENI's
    sg_names: tuple[str, ...]
    reservation_id: str
    account_id: str
    architecture: str
    pending_time: str
    ami_launch_index: int
    enis: tuple[EniMeta, ...] = field(default=())  # by (network card, device number)
    az_id: str = ""  # e.g. use1-az6, from the subnet of the primary ENI
    iam_profile_arn: str = ""  # "" when the instance has no instance profile
    iam_profile_id: str = ""
    credentials_issued: float = 0.0  # epoch seconds; a new hour's EC2 state reissues them

    def eni(self, mac: str) -> EniMeta | None:
        for e in self.enis:
            if e.mac == mac:
                return e
        return None

    def with_enis(self, enis: Iterable[EniMeta]) -> InstanceMeta:
        ordered = sorted(enis, key=lambda e: (e.network_card_index, e.device_number, e.mac))
        return replace(self, enis=tuple(ordered))


@dataclass(frozen=True)
class Ec2State:
    """One observation of EC2, as the Describe calls returned it (boto3 dicts)."""

    t: float  # time.monotonic() when observed
    wall: float  # time.time() of the same moment
    instances: Mapping[str, Mapping[str, Any]]  # instance id -> Instance (+ OwnerId, ReservationId)
    enis: tuple[Mapping[str, Any], ...]  # NetworkInterfaces
    subnets: Mapping[str, Mapping[str, Any]]
    vpcs: Mapping[str, Mapping[str, Any]]
    region: str = "us-east-1"

    def key(self) -> tuple:
        """What the served tree depends on: equal keys serve equal trees."""
        return (
            tuple(sorted((i, _instance_key(d)) for i, d in self.instances.items())),
            tuple(sorted(eni_key(e) for e in self.enis)),
            tuple(sorted(
                (s, d.get("CidrBlock") or "", tuple(ipv6_cidrs(d))) for s, d in self.subnets.items()
            )),
            tuple(sorted(
                (v, tuple(_vpc_cidrs(d)), tuple(ipv6_cidrs(d))) for v, d in self.vpcs.items()
            )),
        )


def _instance_key(d: Mapping[str, Any]) -> tuple:
    return (
        d.get("InstanceType"),
        d.get("ImageId"),
        (d.get("State") or {}).get("Name"),
        d.get("PrivateIpAddress"),
        (d.get("Placement") or {}).get("AvailabilityZone"),
        (d.get("IamInstanceProfile") or {}).get("Arn"),
    )


def eni_key(e: Mapping[str, Any]) -> tuple:
    """What of a Describe ENI the served tree depends on."""
    att = e.get("Attachment") or {}
    return (
        e.get("NetworkInterfaceId"),
        e.get("MacAddress"),
        att.get("InstanceId"),
        att.get("DeviceIndex"),
        att.get("NetworkCardIndex"),
        att.get("Status"),
        tuple(eni_ips(e)),
        tuple(eni_prefixes(e)),
        tuple(eni_ipv6s(e)),
        tuple(eni_ipv6_prefixes(e)),
        tuple((g.get("GroupId", ""), g.get("GroupName", "")) for g in e.get("Groups") or ()),
        e.get("SubnetId"),
        e.get("VpcId"),
        e.get("OwnerId"),
        e.get("PrivateDnsName"),
    )


ENI_FIELDS = (
    "NetworkInterfaceId",
    "MacAddress",
    "PrivateIpAddress",
    "SubnetId",
    "VpcId",
    "OwnerId",
    "PrivateDnsName",
)


def slim_eni(e: Mapping[str, Any]) -> dict[str, Any]:
    """Only the parts of a Describe ENI the tree uses (snapshots are kept for `lag`)."""
    att = e.get("Attachment") or {}
    out: dict[str, Any] = {k: e[k] for k in ENI_FIELDS if k in e}
    out["Attachment"] = {
        k: att[k] for k in ("InstanceId", "DeviceIndex", "NetworkCardIndex", "Status") if k in att
    }
    out["PrivateIpAddresses"] = [
        {"PrivateIpAddress": p.get("PrivateIpAddress"), "Primary": bool(p.get("Primary"))}
        for p in e.get("PrivateIpAddresses") or ()
    ]
    out["Ipv4Prefixes"] = [{"Ipv4Prefix": p.get("Ipv4Prefix")} for p in e.get("Ipv4Prefixes") or ()]
    out["Ipv6Addresses"] = [
        {"Ipv6Address": a.get("Ipv6Address"), "IsPrimaryIpv6": bool(a.get("IsPrimaryIpv6"))}
        for a in e.get("Ipv6Addresses") or ()
    ]
    out["Ipv6Prefixes"] = [{"Ipv6Prefix": p.get("Ipv6Prefix")} for p in e.get("Ipv6Prefixes") or ()]
    out["Groups"] = [
        {"GroupId": g.get("GroupId", ""), "GroupName": g.get("GroupName", "")}
        for g in e.get("Groups") or ()
    ]
    return out


def _vpc_cidrs(vpc: Mapping[str, Any]) -> list[str]:
    primary = vpc.get("CidrBlock")
    out = [primary] if primary else []
    for assoc in vpc.get("CidrBlockAssociationSet") or ():
        state = (assoc.get("CidrBlockState") or {}).get("State", "associated")
        cidr = assoc.get("CidrBlock")
        if cidr and cidr not in out and state == "associated":
            out.append(cidr)
    return out


def ipv6_cidrs(subnet_or_vpc: Mapping[str, Any]) -> list[str]:
    """The associated IPv6 blocks of a Describe subnet or VPC (one being associated or
    disassociated is not served)."""
    out = []
    for assoc in subnet_or_vpc.get("Ipv6CidrBlockAssociationSet") or ():
        state = assoc.get("Ipv6CidrBlockState") or {}
        # moto 5.2 puts the whole state dict, as a string, in State.
        text = str(state.get("State", "") if isinstance(state, Mapping) else state)
        cidr = assoc.get("Ipv6CidrBlock")
        if cidr and "associated" in text and "disassociated" not in text:
            out.append(_canonical_v6(cidr))
    return out


def _canonical_v6(text: str) -> str:
    """RFC 5952 text, so an address from EC2 and one in a fault's target compare equal."""
    try:
        return str(ipaddress.ip_network(text) if "/" in text else ipaddress.IPv6Address(text))
    except ValueError:
        return text


def eni_ipv6s(eni: Mapping[str, Any]) -> list[str]:
    """IPv6 addresses of a Describe ENI, in EC2's order."""
    return [_canonical_v6(a["Ipv6Address"]) for a in eni.get("Ipv6Addresses") or ()
            if a.get("Ipv6Address")]


def eni_ipv6_prefixes(eni: Mapping[str, Any]) -> list[str]:
    return [_canonical_v6(p["Ipv6Prefix"]) for p in eni.get("Ipv6Prefixes") or ()
            if p.get("Ipv6Prefix")]


def eni_ips(eni: Mapping[str, Any]) -> list[str]:
    """Private IPv4s of a Describe ENI, primary first (IMDS's local-ipv4s order)."""
    entries = eni.get("PrivateIpAddresses") or ()
    primary = [p["PrivateIpAddress"] for p in entries if p.get("Primary")]
    others = [p["PrivateIpAddress"] for p in entries if not p.get("Primary")]
    if not primary and eni.get("PrivateIpAddress"):
        primary = [eni["PrivateIpAddress"]]
        others = [ip for ip in others if ip != primary[0]]
    return primary + others


def eni_prefixes(eni: Mapping[str, Any]) -> list[str]:
    return [p["Ipv4Prefix"] for p in eni.get("Ipv4Prefixes") or () if p.get("Ipv4Prefix")]


def hostname_for(ip: str, region: str) -> str:
    host = "ip-" + ip.replace(".", "-")
    return f"{host}.ec2.internal" if region == "us-east-1" else f"{host}.{region}.compute.internal"


def _iso(value: Any) -> str:
    if value is None:
        return ""
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def build_models(state: Ec2State) -> dict[str, InstanceMeta]:
    """Every live instance's metadata, from one EC2 observation."""
    by_instance: dict[str, list[Mapping[str, Any]]] = {}
    for eni in state.enis:
        att = eni.get("Attachment") or {}
        iid = att.get("InstanceId")
        # An attaching ENI is not on the instance yet; a detaching one still is (real IMDS
        # lists it until the detach completes: upstream #732's restart window).
        if iid and att.get("Status", "attached") in ("attached", "detaching"):
            by_instance.setdefault(iid, []).append(eni)
    out: dict[str, InstanceMeta] = {}
    for iid, inst in state.instances.items():
        if (inst.get("State") or {}).get("Name", "running") not in LIVE_STATES:
            continue
        placement = inst.get("Placement") or {}
        az = placement.get("AvailabilityZone", "")
        # The view names each instance's region (EC2 keeps regions apart); else its zone's.
        region = inst.get("Region") or (az[:-1] if az else state.region)
        enis = [_eni_meta(e, state, region) for e in by_instance.get(iid, ())]
        primary = next(
            (e for e in enis if e.device_number == 0 and e.network_card_index == 0), None
        )
        # An IPv6-only instance has no private IPv4 at all.
        primary_ipv4s = primary.local_ipv4s if primary else ()
        local_ip = inst.get("PrivateIpAddress") or next(iter(primary_ipv4s), "")
        account = inst.get("OwnerId") or (primary.owner_id if primary else "") or "123456789012"
        sg_names = tuple(g.get("GroupName", "") for g in inst.get("SecurityGroups") or ())
        if not sg_names and primary:
            sg_names = primary.sg_names
        subnet = state.subnets.get(primary.subnet_id if primary else "", {})
        profile = inst.get("IamInstanceProfile") or {}
        meta = InstanceMeta(
            instance_id=iid,
            instance_type=inst.get("InstanceType", ""),
            ami_id=inst.get("ImageId", ""),
            az=az,
            region=region,
            local_ipv4=local_ip,
            local_hostname=inst.get("PrivateDnsName")
            or (hostname_for(local_ip, region) if local_ip else ""),
            mac=primary.mac if primary else "",
            sg_names=sg_names,
            reservation_id=inst.get("ReservationId", ""),
            account_id=account,
            architecture=inst.get("Architecture") or "x86_64",
            pending_time=_iso(inst.get("LaunchTime")),
            ami_launch_index=int(inst.get("AmiLaunchIndex") or 0),
            az_id=placement.get("AvailabilityZoneId") or subnet.get("AvailabilityZoneId") or "",
            iam_profile_arn=profile.get("Arn", ""),
            iam_profile_id=profile.get("Id", ""),
            credentials_issued=(
                state.wall - state.wall % CREDENTIALS_PERIOD_S if profile.get("Arn") else 0.0
            ),
        )
        out[iid] = meta.with_enis(enis)
    return out


def _eni_meta(eni: Mapping[str, Any], state: Ec2State, region: str) -> EniMeta:
    att = eni.get("Attachment") or {}
    subnet = state.subnets.get(eni.get("SubnetId", ""), {})
    vpc = state.vpcs.get(eni.get("VpcId", "") or subnet.get("VpcId", ""), {})
    ips = eni_ips(eni)
    groups = eni.get("Groups") or ()
    return EniMeta(
        eni_id=eni.get("NetworkInterfaceId", ""),
        mac=eni.get("MacAddress", ""),
        device_number=int(att.get("DeviceIndex") or 0),
        network_card_index=int(att.get("NetworkCardIndex") or 0),
        local_ipv4s=tuple(ips),
        ipv4_prefixes=tuple(eni_prefixes(eni)),
        subnet_id=eni.get("SubnetId", ""),
        subnet_cidr=subnet.get("CidrBlock") or "",  # None on an IPv6-only subnet
        vpc_id=eni.get("VpcId", "") or subnet.get("VpcId", ""),
        vpc_cidrs=tuple(_vpc_cidrs(vpc)),
        ipv6s=tuple(eni_ipv6s(eni)),
        ipv6_prefixes=tuple(eni_ipv6_prefixes(eni)),
        subnet_ipv6_cidrs=tuple(ipv6_cidrs(subnet)),
        vpc_ipv6_cidrs=tuple(ipv6_cidrs(vpc)),
        sg_ids=tuple(g.get("GroupId", "") for g in groups),
        sg_names=tuple(g.get("GroupName", "") for g in groups),
        owner_id=eni.get("OwnerId", ""),
        local_hostname=eni.get("PrivateDnsName") or (hostname_for(ips[0], region) if ips else ""),
    )


def identity_document(m: InstanceMeta) -> str:
    doc = {
        "accountId": m.account_id,
        "architecture": m.architecture,
        "availabilityZone": m.az,
        "billingProducts": None,
        "devpayProductCodes": None,
        "marketplaceProductCodes": None,
        "imageId": m.ami_id,
        "instanceId": m.instance_id,
        "instanceType": m.instance_type,
        "kernelId": None,
        "pendingTime": m.pending_time,
        "privateIp": m.local_ipv4,
        "ramdiskId": None,
        "region": m.region,
        "version": "2017-09-30",
    }
    return _imds_json(doc)


def eni_leaves(e: EniMeta) -> dict[str, str]:
    """The leaves under macs/<mac>/ (relative names). `ipv4-prefix`, `ipv6s`, `ipv6-prefix`
    and the IPv6 blocks only when there are any, as AWS answers 404 otherwise (and the VPC
    CNI reads a 404 on ipv6s / ipv6-prefix as none). On an IPv6-only subnet the IPv4 leaves
    an ENI cannot have are left out too."""
    leaves = {
        "device-number": str(e.device_number),
        "interface-id": e.eni_id,
        "local-hostname": e.local_hostname,
        "local-ipv4s": "\n".join(e.local_ipv4s),
        "mac": e.mac,
        "network-card": str(e.network_card_index),
        "owner-id": e.owner_id,
        "security-group-ids": "\n".join(e.sg_ids),
        "security-groups": "\n".join(e.sg_names),
        "subnet-id": e.subnet_id,
        "subnet-ipv4-cidr-block": e.subnet_cidr,
        "vpc-id": e.vpc_id,
        "vpc-ipv4-cidr-block": e.vpc_cidrs[0] if e.vpc_cidrs else "",
        "vpc-ipv4-cidr-blocks": "\n".join(e.vpc_cidrs),
    }
    if not e.subnet_cidr and e.subnet_ipv6_cidrs:
        del leaves["subnet-ipv4-cidr-block"]
        if not e.local_ipv4s:
            del leaves["local-ipv4s"]
    lists = {"ipv4-prefix": e.ipv4_prefixes, "ipv6s": e.ipv6s, "ipv6-prefix": e.ipv6_prefixes,
             "subnet-ipv6-cidr-blocks": e.subnet_ipv6_cidrs,
             "vpc-ipv6-cidr-blocks": e.vpc_ipv6_cidrs}
    leaves.update((name, "\n".join(values)) for name, values in lists.items() if values)
    return leaves


def render(m: InstanceMeta) -> dict[str, str]:
    """Leaves of one instance's tree, path -> body (no directories)."""
    leaves = {
        META + "ami-id": m.ami_id,
        META + "ami-launch-index": str(m.ami_launch_index),
        META + "ami-manifest-path": "(unknown)",
        META + "block-device-mapping/ami": "/dev/xvda",
        META + "block-device-mapping/root": "/dev/xvda",
        META + "hostname": m.local_hostname,
        META + "instance-action": "none",
        META + "instance-id": m.instance_id,
        META + "instance-life-cycle": "on-demand",
        META + "instance-type": m.instance_type,
        META + "local-hostname": m.local_hostname,
        META + "mac": m.mac,
        META + "events/maintenance/history": "[]",
        META + "events/maintenance/scheduled": "[]",
        META + "placement/availability-zone": m.az,
        META + "placement/region": m.region,
        META + "profile": "default-hvm",
        META + "reservation-id": m.reservation_id,
        META + "security-groups": "\n".join(m.sg_names),
        META + "services/domain": "amazonaws.com",
        META + "services/partition": "aws",
    }
    if m.local_ipv4:  # an IPv6-only instance has none
        leaves[META + "local-ipv4"] = m.local_ipv4
    if m.az_id:
        leaves[META + "placement/availability-zone-id"] = m.az_id
    document = identity_document(m)
    leaves[IDENTITY] = document
    for name, blob in sign_document(document).items():
        leaves[IDENTITY_DIR + name] = blob
    if m.iam_profile_arn:
        leaves.update(iam_leaves(m))
    for e in m.enis:
        base = f"{MACS}{e.mac}/"
        for name, body in eni_leaves(e).items():
            leaves[base + name] = body
    if not m.enis:
        # A directory with no entries is still a directory in IMDS.
        leaves[MACS] = ""
    return leaves


def _iso_epoch(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _imds_json(doc: Mapping[str, Any]) -> str:
    # Real IMDS pretty-prints its JSON leaves with " : " separators.
    return json.dumps(doc, indent=2, separators=(",", " : "))


def iam_leaves(m: InstanceMeta) -> dict[str, str]:
    """`iam/info` and `iam/security-credentials/<role>`. EC2 does not say which role a profile
    holds (that is IAM's), so the role is named after the profile. The credentials are
    derived from the instance, profile and issue time: stable within an hour, distinct per
    instance, and accepted by moto (it checks no signature)."""
    role = m.iam_profile_arn.rsplit("/", 1)[-1]
    issued = _iso_epoch(m.credentials_issued)
    seed = f"{m.instance_id}|{m.iam_profile_arn}|{m.credentials_issued}".encode()
    digest = hashlib.sha512(seed).digest()
    info = {
        "Code": "Success",
        "LastUpdated": issued,
        "InstanceProfileArn": m.iam_profile_arn,
        "InstanceProfileId": m.iam_profile_id,
    }
    creds = {
        "Code": "Success",
        "LastUpdated": issued,
        "Type": "AWS-HMAC",
        "AccessKeyId": "ASIA" + base64.b32encode(digest[:10]).decode()[:16],
        "SecretAccessKey": base64.b64encode(digest[10:40]).decode()[:40],
        "Token": base64.b64encode(hashlib.sha512(digest).digest() * 4).decode(),
        "Expiration": _iso_epoch(m.credentials_issued + CREDENTIALS_LIFETIME_S),
    }
    return {
        META + "iam/info": _imds_json(info),
        META + "iam/security-credentials/" + role: _imds_json(creds),
    }


def as_latest(path: str) -> str:
    """A request path under a dated API version as the same path under `latest` (real IMDS
    serves one tree under every version it lists); other paths unchanged."""
    version, sep, rest = path.partition("/")
    return "latest" + sep + rest if version in _DATED else path


def serve_map(leaves: Mapping[str, str]) -> dict[str, bytes]:
    """Leaves plus every directory listing, each reachable with and without a trailing slash
    (real IMDS answers `placement/availability-zone/` too; botocore relies on it)."""
    dirs: dict[str, list[str]] = {}
    for path in leaves:
        if path.endswith("/"):
            dirs.setdefault(path, [])
        parts = path.rstrip("/").split("/")
        for depth in range(len(parts) - 1):
            d = "/".join(parts[: depth + 1]) + "/"
            entry = parts[depth + 1] + ("/" if depth + 2 < len(parts) or path.endswith("/") else "")
            children = dirs.setdefault(d, [])
            if entry not in children:
                children.append(entry)
    out: dict[str, bytes] = {}
    for d, children in dirs.items():
        if d == "latest/":
            # The version root lists its categories without slashes, as real IMDS does.
            children = sorted(c.rstrip("/") for c in children)
        elif d == META:
            children = sorted(children)
        body = "\n".join(children).encode()
        out[d] = body
        out[d[:-1]] = body
    for path, body in leaves.items():
        if path.endswith("/"):
            continue
        data = body.encode()
        out[path] = data
        out[path + "/"] = data
    out[""] = "\n".join(API_VERSIONS).encode()
    return out


def served_lists(leaves: Mapping[str, str]) -> dict[str, dict[str, tuple[str, ...]]]:
    """{mac: {entry: (...) for entry in SERVED_LISTS}} as served, for the event log."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for path, body in leaves.items():
        if not path.startswith(MACS):
            continue
        rest = path[len(MACS) :]
        mac, _, name = rest.partition("/")
        if not mac:
            continue
        entry = out.setdefault(mac, dict.fromkeys(SERVED_LISTS, ()))
        if name in SERVED_LISTS:
            entry[name] = tuple(x for x in body.split("\n") if x)
    return out


def mac_of_path(path: str) -> str | None:
    """The MAC a request path is about, if any."""
    if not path.startswith(MACS):
        return None
    mac = path[len(MACS) :].split("/", 1)[0]
    return mac or None
