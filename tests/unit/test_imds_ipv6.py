"""IPv6 in the fault IMDS (the VPC CNI's IPv6 mode): `ipv6s`, `ipv6-prefix`,
`subnet-ipv6-cidr-blocks` and `vpc-ipv6-cidr-blocks` per MAC, as real IMDS serves them
(absent, so 404, when there are none), and every IMDS fault kind acting on them.

Pure tests on hand-made EC2 observations first (IPv6 prefixes: moto does not keep them),
then end to end against moto behind the gate, then real clients (cloud-init, botocore)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time

import pytest
from botocore.utils import IMDSFetcher

from cnikit.cloud import Cloud
from fault_imds.client import FaultClient, FaultError
from fault_imds.engine import Engine
from fault_imds.faults import SpecError
from fault_imds.server import ImdsServer
from fault_imds.tree import (
    MACS,
    Ec2State,
    build_models,
    eni_key,
    render,
    serve_map,
    served_lists,
    slim_eni,
)
from tests.unit.imds_support import MACS as MACS_URL
from tests.unit.imds_support import Imds, dual_stack
from tests.unit.test_imds_clients import SYSTEM_PYTHON, _cloud_init_missing
from tests.waiting import wait_for

MAC0, MAC1 = "02:00:00:00:00:01", "02:00:00:00:00:02"
VPC_V6 = "2600:1f18:abcd:cc00::/56"
SUBNET_V6 = "2600:1f18:abcd:cc01::/64"
A1, A2, A3 = "2600:1f18:abcd:cc01::5", "2600:1f18:abcd:cc01::6", "2600:1f18:abcd:cc01::7"
P1, P2 = "2600:1f18:abcd:cc01:1::/80", "2600:1f18:abcd:cc01:2::/80"
# moto 5.2 writes the whole state dict, as a string, into State.
MOTO_ASSOCIATED = {"State": "{'State': 'associated'}"}


def eni(eni_id, mac, device, ipv4s=("10.0.1.4",), ipv6s=(), ipv6_prefixes=(),
        subnet="subnet-ds"):
    return {
        "NetworkInterfaceId": eni_id, "MacAddress": mac,
        "Attachment": {"InstanceId": "i-1", "DeviceIndex": device, "Status": "attached"},
        "PrivateIpAddresses": [{"PrivateIpAddress": ip, "Primary": n == 0}
                               for n, ip in enumerate(ipv4s)],
        **({"PrivateIpAddress": ipv4s[0]} if ipv4s else {}),
        "Ipv6Addresses": [{"Ipv6Address": a, "IsPrimaryIpv6": False} for a in ipv6s],
        "Ipv6Prefixes": [{"Ipv6Prefix": p} for p in ipv6_prefixes],
        "SubnetId": subnet, "VpcId": "vpc-1", "OwnerId": "123456789012",
        "Groups": [{"GroupId": "sg-1", "GroupName": "default"}],
    }


def state(t, enis, subnet_v6=(SUBNET_V6,), vpc_v6=(VPC_V6,), private_ip="10.0.1.4"):
    v6_assoc = [{"Ipv6CidrBlock": b, "Ipv6CidrBlockState": MOTO_ASSOCIATED} for b in subnet_v6]
    return Ec2State(
        t=t, wall=1e9 + t,
        instances={"i-1": {"InstanceId": "i-1", "InstanceType": "m5.large", "ImageId": "ami-1",
                           "State": {"Name": "running"},
                           "Placement": {"AvailabilityZone": "us-east-1a"},
                           **({"PrivateIpAddress": private_ip} if private_ip else {})}},
        enis=tuple(enis),
        subnets={
            "subnet-ds": {"SubnetId": "subnet-ds", "VpcId": "vpc-1", "CidrBlock": "10.0.1.0/24",
                          "Ipv6CidrBlockAssociationSet": v6_assoc},
            # IPv6-only: no CidrBlock at all (Describe leaves it out; some emulators send None).
            "subnet-v6": {"SubnetId": "subnet-v6", "VpcId": "vpc-1", "CidrBlock": None,
                          "Ipv6Native": True, "Ipv6CidrBlockAssociationSet": v6_assoc},
            "subnet-v4": {"SubnetId": "subnet-v4", "VpcId": "vpc-1", "CidrBlock": "10.0.2.0/24"},
        },
        vpcs={"vpc-1": {"VpcId": "vpc-1", "CidrBlock": "10.0.0.0/16",
                        "Ipv6CidrBlockAssociationSet": [
                            {"Ipv6CidrBlock": b, "Ipv6CidrBlockState": {"State": "associated"},
                             "Ipv6Pool": "Amazon"} for b in vpc_v6]}},
    )


def leaves_of(s: Ec2State) -> dict[str, str]:
    return render(build_models(s)["i-1"])


def served(engine: Engine, mac: str, entry: str) -> list[str] | None:
    body = engine.served["i-1"].get(f"{MACS}{mac}/{entry}")
    return body.decode().split("\n") if body is not None else None


# -- the tree ------------------------------------------------------------------------------------


def test_dual_stack_eni_serves_ipv6s_prefixes_and_blocks():
    s = state(0, [eni("eni-0", MAC0, 0, ipv4s=("10.0.1.4", "10.0.1.5"),
                      ipv6s=(A1, "2600:1f18:ABCD:cc01:0:0:0:6"), ipv6_prefixes=(P1, P2))])
    leaves = leaves_of(s)
    base = f"{MACS}{MAC0}/"
    # RFC 5952 text whatever EC2 wrote: an address compares equal to a fault's target.
    assert leaves[base + "ipv6s"] == f"{A1}\n{A2}"
    assert leaves[base + "ipv6-prefix"] == f"{P1}\n{P2}"
    assert leaves[base + "subnet-ipv6-cidr-blocks"] == SUBNET_V6
    assert leaves[base + "vpc-ipv6-cidr-blocks"] == VPC_V6
    assert leaves[base + "local-ipv4s"] == "10.0.1.4\n10.0.1.5"
    listing = serve_map(leaves)[base].decode().split("\n")
    assert {"ipv6s", "ipv6-prefix", "subnet-ipv6-cidr-blocks", "vpc-ipv6-cidr-blocks",
            "local-ipv4s", "subnet-ipv4-cidr-block"} <= set(listing)
    assert served_lists(leaves)[MAC0] == {"local-ipv4s": ("10.0.1.4", "10.0.1.5"),
                                          "ipv4-prefix": (), "ipv6s": (A1, A2),
                                          "ipv6-prefix": (P1, P2)}


def test_ipv4_only_eni_serves_no_ipv6_leaves_and_they_404():
    s = state(0, [eni("eni-0", MAC0, 0, subnet="subnet-v4"),
                  eni("eni-1", MAC1, 1, ipv4s=("10.0.1.9",))], vpc_v6=())
    served_map = serve_map(leaves_of(s))
    listing = served_map[f"{MACS}{MAC0}/"].decode().split("\n")
    assert "local-ipv4s" in listing and not [x for x in listing if "ipv6" in x], listing
    # An IPv4-only ENI on a dual-stack subnet: the subnet's block, and nothing else IPv6.
    listing = served_map[f"{MACS}{MAC1}/"].decode().split("\n")
    assert [x for x in listing if "ipv6" in x] == ["subnet-ipv6-cidr-blocks"], listing
    engine = Engine(clock=lambda: 0.0)
    engine.set_state(s)
    imds = engine.served["i-1"]
    for mac in (MAC0, MAC1):
        for leaf in ("ipv6s", "ipv6-prefix", "vpc-ipv6-cidr-blocks"):
            assert f"{MACS}{mac}/{leaf}" not in imds  # the handler's 404
    assert f"{MACS}{MAC0}/subnet-ipv6-cidr-blocks" not in imds
    # The event log says nothing about IPv6 lists that were never served.
    entries = {ev["entry"] for ev in engine.events.since(0) if ev["type"] == "served"}
    assert entries == {"local-ipv4s"}


def test_ipv6_only_subnet_and_instance():
    s = state(0, [eni("eni-0", MAC0, 0, ipv4s=(), ipv6s=(A1,), ipv6_prefixes=(P1,),
                      subnet="subnet-v6")], private_ip=None)
    s.key()  # a subnet without CidrBlock sorts and compares like any other
    m = build_models(s)["i-1"]
    assert m.local_ipv4 == "" and m.enis[0].subnet_cidr == ""
    leaves = render(m)
    base = f"{MACS}{MAC0}/"
    assert leaves[base + "ipv6s"] == A1 and leaves[base + "ipv6-prefix"] == P1
    assert leaves[base + "subnet-ipv6-cidr-blocks"] == SUBNET_V6
    # What an ENI on an IPv6-only subnet cannot have is not served (upstream's
    # imdsMACFieldsV6Only lists neither).
    for gone in (base + "local-ipv4s", base + "subnet-ipv4-cidr-block",
                 "latest/meta-data/local-ipv4"):
        assert gone not in leaves
    engine = Engine(clock=lambda: 0.0)
    engine.set_state(s)
    # The caller is known by its IPv6 address, or one inside its IPv6 prefix.
    assert engine.owner_of(A1) == "i-1"
    assert engine.owner_of("2600:1f18:abcd:cc01:1::42") == "i-1"
    assert engine.owner_of(A3) is None


def test_ipv6_changes_make_a_new_snapshot():
    """The view stores a snapshot only when Ec2State.key() changes, from slim ENIs: an IPv6
    change that the key or slim_eni dropped would never be served (nor lagged)."""
    base = eni("eni-0", MAC0, 0, ipv6s=(A1,), ipv6_prefixes=(P1,))
    keys = {
        "base": state(0, [base]).key(),
        "address": state(0, [eni("eni-0", MAC0, 0, ipv6s=(A1, A2), ipv6_prefixes=(P1,))]).key(),
        "prefix": state(0, [eni("eni-0", MAC0, 0, ipv6s=(A1,), ipv6_prefixes=(P2,))]).key(),
        "subnet block": state(0, [base], subnet_v6=()).key(),
        "vpc block": state(0, [base], vpc_v6=()).key(),
    }
    assert len(set(keys.values())) == len(keys), keys
    slim = slim_eni(base)
    assert eni_key(slim) == eni_key(base)
    assert leaves_of(state(0, [slim])) == leaves_of(state(0, [base]))


def test_blocks_being_associated_or_disassociated_are_not_served():
    s = state(0, [eni("eni-0", MAC0, 0, ipv6s=(A1,))])
    s.subnets["subnet-ds"]["Ipv6CidrBlockAssociationSet"] = [
        {"Ipv6CidrBlock": "2600:1f18:abcd:cc09::/64",
         "Ipv6CidrBlockState": {"State": "disassociated"}},
        {"Ipv6CidrBlock": "2600:1f18:abcd:cc0a::/64",
         "Ipv6CidrBlockState": {"State": "associating"}},
        {"Ipv6CidrBlock": SUBNET_V6, "Ipv6CidrBlockState": {"State": "associated"}},
    ]
    assert leaves_of(s)[f"{MACS}{MAC0}/subnet-ipv6-cidr-blocks"] == SUBNET_V6


# -- faults on hand-made states ------------------------------------------------------------------


def dual(t, ipv6s=(A1, A2), prefixes=(P1, P2)):
    return state(t, [eni("eni-0", MAC0, 0, ipv6s=ipv6s, ipv6_prefixes=prefixes),
                     eni("eni-1", MAC1, 1, ipv4s=("10.0.1.9",), ipv6s=(A3,))])


def test_ips_targets_take_ipv6_addresses_and_prefixes_in_any_spelling():
    e = Engine(clock=lambda: 0.0)
    e.set_state(dual(0))
    f = e.add({"kind": "missing", "target": {"ips": ["2600:1F18:ABCD:CC01:0::5", P2]}})
    assert f.target.ips == (A1, P2)
    assert served(e, MAC0, "ipv6s") == [A2] and served(e, MAC0, "ipv6-prefix") == [P1]
    assert served(e, MAC1, "ipv6s") == [A3]
    for bad in ("2600:1f18::zz", "2600:1f18:abcd:cc01:1::1/80", "::/129"):
        with pytest.raises(SpecError, match="is not an IP address or prefix"):
            e.add({"kind": "stale", "target": {"ips": [bad]}})


def test_missing_every_ipv6_leaves_the_entries_out():
    e = Engine(clock=lambda: 0.0)
    e.set_state(dual(0))
    e.add({"kind": "missing", "target": {"mac": MAC0, "ips": [A1, A2, P1, P2]}})
    assert served(e, MAC0, "ipv6s") is None and served(e, MAC0, "ipv6-prefix") is None
    assert served(e, MAC0, "local-ipv4s") == ["10.0.1.4"]
    assert served(e, MAC1, "ipv6s") == [A3]


def test_stale_ips_hold_ipv6_membership():
    e = Engine(clock=lambda: 0.0)
    e.set_state(dual(0))
    e.add({"kind": "stale", "target": {"ips": [A2, P2, A3]}})
    # EC2 takes A2 and P2 back and moves A3 to MAC0; the held ones stay as they were served.
    e.set_state(state(1, [eni("eni-0", MAC0, 0, ipv6s=(A1, A3), ipv6_prefixes=(P1,)),
                          eni("eni-1", MAC1, 1, ipv4s=("10.0.1.9",))]))
    assert served(e, MAC0, "ipv6s") == [A1, A2]
    assert served(e, MAC0, "ipv6-prefix") == [P1, P2]
    assert served(e, MAC1, "ipv6s") == [A3]
    e.clear()
    assert served(e, MAC0, "ipv6s") == [A1, A3] and served(e, MAC1, "ipv6s") is None


def test_lag_ips_shows_ipv6_changes_late():
    clock = [100.0]
    snapshots: list[Ec2State] = []

    class History:
        def at(self, t):
            older = [s for s in snapshots if s.t <= t]
            return older[-1] if older else snapshots[0]

    e = Engine(history=History(), clock=lambda: clock[0])

    def observe(s):
        snapshots.append(s)
        e.set_state(s)

    observe(dual(90, ipv6s=(A1,), prefixes=(P1,)))
    e.add({"kind": "lag", "seconds": 5, "target": {"ips": [A2, P2]}})
    observe(dual(100, ipv6s=(A1, A2), prefixes=(P1, P2)))
    assert served(e, MAC0, "ipv6s") == [A1] and served(e, MAC0, "ipv6-prefix") == [P1]
    clock[0] = 105.0
    e.tick()
    assert served(e, MAC0, "ipv6s") == [A1, A2] and served(e, MAC0, "ipv6-prefix") == [P1, P2]


def test_mac_path_and_instance_targets_cover_the_ipv6_leaves():
    e = Engine(clock=lambda: 0.0)
    e.set_state(dual(0))
    e.add({"kind": "stale", "target": {"mac": MAC0}})
    e.add({"kind": "missing", "target": {"path": "latest/meta-data/network/*/vpc-ipv6-cidr-blocks"}})
    e.set_state(dual(1, ipv6s=(), prefixes=()))
    assert served(e, MAC0, "ipv6s") == [A1, A2]  # the whole interface held
    assert served(e, MAC0, "ipv6-prefix") == [P1, P2]
    assert served(e, MAC0, "vpc-ipv6-cidr-blocks") is None
    assert served(e, MAC1, "vpc-ipv6-cidr-blocks") is None
    assert served(e, MAC0, "subnet-ipv6-cidr-blocks") == [SUBNET_V6]
    e.clear()
    e.add({"kind": "missing", "target": {"instance_id": "i-1"}})
    assert "i-1" not in e.served


def test_served_events_follow_ipv6_lists():
    e = Engine(clock=lambda: 0.0)
    e.set_state(dual(0, ipv6s=(A1,), prefixes=()))
    e.set_state(dual(1, ipv6s=(A1, A2), prefixes=(P1,)))
    e.set_state(dual(2, ipv6s=(), prefixes=()))
    got = [(ev["mac"], ev["entry"], ev["values"]) for ev in e.events.since(0)
           if ev["type"] == "served" and ev["entry"].startswith("ipv6")]
    assert got == [(MAC0, "ipv6s", [A1]), (MAC1, "ipv6s", [A3]),
                   (MAC0, "ipv6s", [A1, A2]), (MAC0, "ipv6-prefix", [P1]),
                   (MAC0, "ipv6s", []), (MAC0, "ipv6-prefix", [])]


# -- end to end: moto behind the gate ------------------------------------------------------------

SEED = 20260606


@pytest.fixture(scope="module")
def world():
    cloud = Cloud.start(ec2="moto", seed=SEED)
    net = dual_stack(cloud.client())
    server = ImdsServer(ec2_endpoint=cloud.endpoint, instance_id=net.instance_id,
                        seed=SEED).start()
    yield cloud, net, server
    server.stop()
    cloud.stop()


@pytest.fixture
def fc(world):
    client = FaultClient(world[2].control_url)
    client.clear()
    yield client
    client.clear()


def ipv6s_on(ec2, eni_id: str) -> list[str]:
    found = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"]
    return [a["Ipv6Address"] for a in found[0].get("Ipv6Addresses") or ()]


def test_dual_stack_instance_as_served(world):
    cloud, net, server = world
    imds = Imds(server.url)
    base = f"{MACS_URL}{net.mac}/"
    assert imds.lines(base + "ipv6s") == list(net.ipv6s)
    assert imds.text(base + "subnet-ipv6-cidr-blocks") == net.subnet_block
    assert imds.text(base + "vpc-ipv6-cidr-blocks") == net.vpc_block
    assert imds.get(base + "ipv6-prefix")[0] == 404  # moto keeps no IPv6 prefixes
    listing = imds.lines(base)
    assert {"ipv6s", "subnet-ipv6-cidr-blocks", "vpc-ipv6-cidr-blocks"} <= set(listing)
    assert imds.text(base + "local-ipv4s")  # dual stack: IPv4 as before


def test_ipv6_assign_and_unassign_show_up_at_once(world):
    cloud, net, server = world
    ec2, imds = cloud.client(), Imds(server.url)
    extra = net.address(0x200)
    ec2.assign_ipv6_addresses(NetworkInterfaceId=net.eni_id, Ipv6Addresses=[extra])
    try:
        # EC2 is in this process: an answer waits until the view has read EC2 as of now.
        assert imds.lines(f"{MACS_URL}{net.mac}/ipv6s") == [*net.ipv6s, extra]
    finally:
        ec2.unassign_ipv6_addresses(NetworkInterfaceId=net.eni_id, Ipv6Addresses=[extra])
    assert imds.lines(f"{MACS_URL}{net.mac}/ipv6s") == list(net.ipv6s)


def test_stale_holds_an_unassigned_ipv6(world, fc):
    cloud, net, server = world
    ec2, imds = cloud.client(), Imds(server.url)
    held = net.ipv6s[-1]
    with fc.stale(ips=[held]):
        ec2.unassign_ipv6_addresses(NetworkInterfaceId=net.eni_id, Ipv6Addresses=[held])
        try:
            assert held not in ipv6s_on(ec2, net.eni_id)
            assert imds.lines(f"{MACS_URL}{net.mac}/ipv6s") == list(net.ipv6s)
        finally:
            ec2.assign_ipv6_addresses(NetworkInterfaceId=net.eni_id, Ipv6Addresses=[held])


def test_missing_leaves_ipv6s_out(world, fc):
    cloud, net, server = world
    imds = Imds(server.url)
    url = f"{MACS_URL}{net.mac}/ipv6s"
    with fc.missing(mac=net.mac, ips=[net.ipv6s[0]]):
        assert imds.lines(url) == list(net.ipv6s[1:])
    with fc.missing(ips=list(net.ipv6s)):
        assert imds.get(url)[0] == 404  # none left: as real IMDS, no entry at all
    assert imds.lines(url) == list(net.ipv6s)


def test_lag_shows_a_new_ipv6_late(world, fc):
    cloud, net, server = world
    ec2, imds = cloud.client(), Imds(server.url)
    url = f"{MACS_URL}{net.mac}/ipv6s"
    late = net.address(0x300)
    lag_s = 1.5
    fc.lag(seconds=lag_s, ips=[late])
    assigned = time.monotonic()
    ec2.assign_ipv6_addresses(NetworkInterfaceId=net.eni_id, Ipv6Addresses=[late])
    try:
        first = imds.lines(url)
        if time.monotonic() - assigned < lag_s * 0.9:  # a read that came in time to judge
            assert first == list(net.ipv6s)
        wait_for(lambda: imds.lines(url) == [*net.ipv6s, late], lag_s + 3, "the lagged address")
        assert time.monotonic() - assigned >= lag_s * 0.9
    finally:
        ec2.unassign_ipv6_addresses(NetworkInterfaceId=net.eni_id, Ipv6Addresses=[late])


def test_error_on_ipv6s_path(world, fc):
    cloud, net, server = world
    imds = Imds(server.url)
    with fc.error(status=500, path="*/ipv6s"):
        assert imds.get(f"{MACS_URL}{net.mac}/ipv6s")[0] == 500
        assert imds.get(f"{MACS_URL}{net.mac}/local-ipv4s")[0] == 200
    assert imds.get(f"{MACS_URL}{net.mac}/ipv6s")[0] == 200


def test_control_api_refuses_a_bad_ipv6_target_in_one_line(world, fc):
    with pytest.raises(FaultError) as bad:
        fc.add("missing", target={"ips": ["2600:1f18::5::6"]})
    msg = str(bad.value)
    assert "'2600:1f18::5::6' is not an IP address or prefix" in msg and "\n" not in msg
    assert fc.list() == []


@pytest.mark.parametrize("ec2_at", ["gate", "moto"])
def test_an_ipv6_only_subnet_in_the_vpc_does_not_stop_the_imds(ec2_at):
    """A subnet without an IPv4 CIDR (Ipv6Native) in the VPC: the IMDS goes on following
    EC2. Against the gate and against moto itself (moto gives an instance launched there an
    IPv6 address as its private IPv4, so none is launched: the subnet's presence is the test)."""
    cloud = Cloud.start(ec2="moto", seed=SEED)
    try:
        ec2 = cloud.client()
        net = dual_stack(ec2, ipv6_count=1)
        endpoint = cloud.endpoint if ec2_at == "gate" else cloud.upstream_url
        with ImdsServer(ec2_endpoint=endpoint, instance_id=net.instance_id) as server:
            imds = Imds(server.url)
            url = f"{MACS_URL}{net.mac}/ipv6s"
            wait_for(lambda: imds.lines(url) == list(net.ipv6s), 10, "the first address")
            blocks = ipaddress.IPv6Network(net.vpc_block).subnets(new_prefix=64)
            next(blocks)
            v6_only = ec2.create_subnet(
                VpcId=net.vpc_id, Ipv6Native=True, Ipv6CidrBlock=str(next(blocks)),
                AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
            ec2.assign_ipv6_addresses(NetworkInterfaceId=net.eni_id,
                                      Ipv6Addresses=[net.address(0x400)])

            def followed():
                # No ENI names the new subnet: the view's periodic network refresh brings it.
                latest = server.ec2.latest()
                return (v6_only in latest.subnets
                        and imds.lines(url) == [*net.ipv6s, net.address(0x400)])

            try:
                wait_for(followed, 15, "the IMDS to follow EC2 with the IPv6-only subnet")
            except AssertionError as e:
                raise AssertionError(f"{e}; the view's last EC2 error: "
                                     f"{server.ec2.last_error}") from None
    finally:
        cloud.stop()


# -- real clients ----------------------------------------------------------------------------


def test_botocore_imds_fetcher_reads_ipv6s_with_imdsv2(world):
    cloud, net, server = world
    fetcher = IMDSFetcher(timeout=2, num_attempts=2,
                          config={"ec2_metadata_service_endpoint": server.url + "/"})
    token = fetcher._fetch_metadata_token()
    assert token
    resp = fetcher._get_request(f"latest/meta-data/network/interfaces/macs/{net.mac}/ipv6s",
                                None, token=token)
    assert resp.status_code == 200
    assert resp.text.split("\n") == list(net.ipv6s)


CLOUD_INIT_NETWORK = """
import json, sys, tempfile
from cloudinit import helpers
from cloudinit.sources import DataSourceEc2
tmp = tempfile.mkdtemp()
cfg = {"datasource": {"Ec2": {"metadata_urls": [sys.argv[1]], "max_wait": 10, "timeout": 5}}}
ds = DataSourceEc2.DataSourceEc2(cfg, None, helpers.Paths({"run_dir": tmp, "cloud_dir": tmp}))
ds._cloud_name = "aws"  # what DMI says on EC2; this machine's DMI says otherwise
crawled = ds.crawl_metadata()
netcfg = DataSourceEc2.convert_ec2_metadata_network_config(
    crawled["meta-data"]["network"], macs_to_nics={sys.argv[2]: "eth0"}, fallback_nic="eth0")
print(json.dumps({"crawled": crawled, "network": netcfg}, default=str))
"""


def test_cloud_init_turns_on_dhcp6_from_ipv6s(world):
    """cloud-init's EC2 datasource crawls the dual-stack instance, and its network config
    (convert_ec2_metadata_network_config) does with `ipv6s` what it does on EC2: dhcp6 on the
    NIC, and every address after the first configured statically. It reads the subnet's
    prefix length from `subnet-ipv6-cidr-block`, which real IMDS does not serve (it serves
    `subnet-ipv6-cidr-blocks`): so /128, as on EC2."""
    missing = _cloud_init_missing()
    if missing:
        pytest.skip(missing)
    cloud, net, server = world
    out = subprocess.run([SYSTEM_PYTHON, "-c", CLOUD_INIT_NETWORK, server.url, net.mac],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    nic = doc["crawled"]["meta-data"]["network"]["interfaces"]["macs"][net.mac]
    assert nic["ipv6s"] == list(net.ipv6s)  # two lines: cloud-init makes a list
    assert nic["subnet-ipv6-cidr-blocks"] == net.subnet_block
    assert nic["vpc-ipv6-cidr-blocks"] == net.vpc_block
    assert "ipv6-prefix" not in nic
    eth0 = doc["network"]["ethernets"]["eth0"]
    assert eth0["dhcp4"] is True and eth0["dhcp6"] is True
    assert eth0["match"] == {"macaddress": net.mac}
    assert eth0["addresses"] == [f"{net.ipv6s[1]}/128"]


def test_the_reports_imds_view_stays_the_ipv4_lists():
    """cnikit's report draws what IMDS served as IPv4: an `ipv6s` change later must not
    move the time since which it says the IPv4 list was served."""
    from cnikit.report import timeline

    def event(seq, t, entry, values):
        return {"seq": seq, "time": t, "type": "served", "instance_id": "i-1", "mac": MAC0,
                "eni_id": "eni-0", "entry": entry, "values": values, "present": True}

    tl = timeline.build([], [event(1, 1000.0, "local-ipv4s", ["10.0.1.4"]),
                             event(2, 1005.0, "ipv6s", [A1])])
    assert tl.imds_served["eni-0"] == [(1000.0, {"10.0.1.4"})]
