"""The EC2 gate enforces real EC2's IPv6 rules: plain boto3 (and the AWS CLI) against the
gate in front of moto, which enforces none of them.

Each refusal is checked for EC2's error code and for leaving the state unchanged: the
gate's ownership version, and the upstream's own answer.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import subprocess

import pytest
from botocore.exceptions import ClientError

from tests.unit.ec2_support import refused
from tests.unit.test_gate_regions import aws_cli
from tests.waiting import wait_for

_numbers = itertools.count(100)


def dual_stack(cloud, nodes: int = 2):
    n = next(_numbers)
    cloud.gate.faults.clear()
    return cloud.bootstrap(nodes=nodes, vpc_cidr=f"10.{n}.0.0/16",
                           subnet_cidr=f"10.{n}.1.0/24", ipv6=True)


def described(ec2, eni_id: str) -> dict:
    return ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0]


def v6s(ec2, eni_id: str) -> list[str]:
    return [a["Ipv6Address"] for a in described(ec2, eni_id).get("Ipv6Addresses", ())]


def v6_prefixes(ec2, eni_id: str) -> list[str]:
    return [p["Ipv6Prefix"] for p in described(ec2, eni_id).get("Ipv6Prefixes", ())]


def upstream_v6s(cloud, eni_id: str) -> list[str]:
    raw = cloud.client(endpoint=cloud.upstream_url)
    eni = raw.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0]
    return sorted(a["Ipv6Address"] for a in eni.get("Ipv6Addresses", ()))


def listed(ec2, eni_id: str) -> bool:
    try:
        described(ec2, eni_id)
    except ClientError:  # not in the Describe's past yet
        return False
    return True


def host6(topo, n: int) -> str:
    return str(ipaddress.IPv6Network(topo.subnet_ipv6_cidr)[n])


@pytest.fixture
def v6(gate_cloud):
    """(cloud, topology, ec2 client) of a fresh dual-stack VPC with two m5.large nodes."""
    return gate_cloud, dual_stack(gate_cloud), gate_cloud.client()


def test_a_dual_stack_vpc_gives_each_node_one_address_of_its_subnet(v6):
    cloud, topo, ec2 = v6
    vpc = ipaddress.IPv6Network(topo.vpc_ipv6_cidr)
    subnet = ipaddress.IPv6Network(topo.subnet_ipv6_cidr)
    assert vpc.prefixlen == 56 and subnet.prefixlen == 64 and subnet.subnet_of(vpc)
    primaries = [i.primary_ipv6 for i in topo.instances]
    assert len(set(primaries)) == 2
    for inst in topo.instances:
        addr = ipaddress.IPv6Address(inst.primary_ipv6)
        assert addr in subnet and int(addr) - int(subnet.network_address) >= 4  # AWS's four
        assert v6s(ec2, inst.primary_eni_id) == [inst.primary_ipv6]
        assert cloud.gate.owners().ipv6s[inst.primary_ipv6].eni_id == inst.primary_eni_id
    sn = ec2.describe_subnets(SubnetIds=[topo.subnet_id])["Subnets"][0]
    assert sn["AssignIpv6AddressOnCreation"] is True


def test_assign_by_count_picks_free_addresses_the_upstream_holds_too(v6):
    cloud, topo, ec2 = v6
    a, b = (i.primary_eni_id for i in topo.instances)
    got_a = ec2.assign_ipv6_addresses(NetworkInterfaceId=a, Ipv6AddressCount=3)
    got_b = ec2.assign_ipv6_addresses(NetworkInterfaceId=b, Ipv6AddressCount=3)
    picked = got_a["AssignedIpv6Addresses"] + got_b["AssignedIpv6Addresses"]
    held = picked + [i.primary_ipv6 for i in topo.instances]
    assert len(set(held)) == len(held) == 8  # moto's own pick is random: two could meet
    assert sorted(upstream_v6s(cloud, a)) == sorted(v6s(ec2, a))
    assert set(got_a["AssignedIpv6Addresses"]) <= set(v6s(ec2, a))


def test_an_address_another_eni_holds_is_refused(v6):
    cloud, topo, ec2 = v6
    a, b = topo.instances
    before = cloud.gate.owners().version
    msg = refused(lambda: ec2.assign_ipv6_addresses(
        NetworkInterfaceId=b.primary_eni_id, Ipv6Addresses=[a.primary_ipv6]),
        "InvalidParameterValue")
    assert "in use" in msg
    assert a.primary_ipv6 not in v6s(ec2, b.primary_eni_id)
    assert a.primary_ipv6 not in upstream_v6s(cloud, b.primary_eni_id)
    assert cloud.gate.owners().version == before


@pytest.mark.parametrize("address, why", [
    ("2001:db8::10", "does not fall within"),  # another network entirely
    ("first", "reserved"),                      # the subnet's first address (AWS's)
    ("last", "reserved"),                       # and its last
    ("not-an-address", "Invalid value"),
])
def test_addresses_outside_the_subnet_or_reserved_are_refused(v6, address, why):
    cloud, topo, ec2 = v6
    net = ipaddress.IPv6Network(topo.subnet_ipv6_cidr)
    address = {"first": str(net[1]), "last": str(net[-1])}.get(address, address)
    eni = topo.instances[0].primary_eni_id
    msg = refused(lambda: ec2.assign_ipv6_addresses(NetworkInterfaceId=eni,
                                                    Ipv6Addresses=[address]),
                  "InvalidParameterValue")
    assert why in msg
    assert v6s(ec2, eni) == [topo.instances[0].primary_ipv6]


def test_a_prefix_is_an_aligned_80_that_no_address_may_enter(v6):
    cloud, topo, ec2 = v6
    a, b = (i.primary_eni_id for i in topo.instances)
    got = ec2.assign_ipv6_addresses(NetworkInterfaceId=a, Ipv6PrefixCount=1)
    (prefix,) = got["AssignedIpv6Prefixes"]
    net = ipaddress.IPv6Network(prefix)
    assert net.prefixlen == 80 and net.subnet_of(ipaddress.IPv6Network(topo.subnet_ipv6_cidr))
    # The /80 that holds the subnet's reserved first addresses and the nodes' is not given.
    assert all(ipaddress.IPv6Address(i.primary_ipv6) not in net for i in topo.instances)
    assert v6_prefixes(ec2, a) == [prefix]
    assert cloud.gate.owners().ipv6_prefixes[prefix].eni_id == a
    inside = str(net[7])
    assert "prefix" in refused(lambda: ec2.assign_ipv6_addresses(
        NetworkInterfaceId=b, Ipv6Addresses=[inside]), "InvalidParameterValue")
    assert "overlaps" in refused(lambda: ec2.assign_ipv6_addresses(
        NetworkInterfaceId=b, Ipv6Prefixes=[prefix]), "InvalidParameterValue")
    unaligned = f"{net[1]}/80"
    assert "/80" in refused(lambda: ec2.assign_ipv6_addresses(
        NetworkInterfaceId=b, Ipv6Prefixes=[unaligned]), "InvalidParameterValue")
    assert "/80" in refused(lambda: ec2.assign_ipv6_addresses(
        NetworkInterfaceId=b, Ipv6Prefixes=[str(net.supernet(new_prefix=72))]),
        "InvalidParameterValue")
    # The next count-based pick for b skips a's /80 and the addresses in use.
    (other,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=b,
                                         Ipv6PrefixCount=1)["AssignedIpv6Prefixes"]
    assert not ipaddress.IPv6Network(other).overlaps(net)


def test_a_prefix_over_an_address_in_use_is_refused(v6):
    cloud, topo, ec2 = v6
    a, b = (i.primary_eni_id for i in topo.instances)
    far = str(ipaddress.IPv6Network(topo.subnet_ipv6_cidr)[(5 << 48) + 9])
    ec2.assign_ipv6_addresses(NetworkInterfaceId=a, Ipv6Addresses=[far])
    block = str(ipaddress.IPv6Network(f"{far}/80", strict=False))
    before = cloud.gate.owners().version
    assert "overlaps" in refused(lambda: ec2.assign_ipv6_addresses(
        NetworkInterfaceId=b, Ipv6Prefixes=[block]), "InvalidParameterValue")
    assert cloud.gate.owners().version == before and v6_prefixes(ec2, b) == []


def test_the_instance_types_ipv6_limit_counts_addresses_and_prefixes(v6):
    cloud, topo, ec2 = v6
    eni = topo.instances[0].primary_eni_id  # m5.large: 10 IPv6 per ENI, one used already
    ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6PrefixCount=2)
    ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6AddressCount=6)
    before = cloud.gate.owners().version
    msg = refused(lambda: ec2.assign_ipv6_addresses(NetworkInterfaceId=eni,
                                                    Ipv6AddressCount=2),
                  "InvalidParameterValue")
    assert "limit" in msg
    assert cloud.gate.owners().version == before
    ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6PrefixCount=1)  # the tenth slot
    refused(lambda: ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6PrefixCount=1),
            "InvalidParameterValue")
    assert len(v6s(ec2, eni)) + len(v6_prefixes(ec2, eni)) == 10


def test_unassign_frees_what_was_held_and_refuses_what_was_not(v6):
    cloud, topo, ec2 = v6
    a, b = (i.primary_eni_id for i in topo.instances)
    (addr,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=a,
                                        Ipv6AddressCount=1)["AssignedIpv6Addresses"]
    (prefix,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=a,
                                          Ipv6PrefixCount=1)["AssignedIpv6Prefixes"]
    assert "not assigned" in refused(lambda: ec2.unassign_ipv6_addresses(
        NetworkInterfaceId=b, Ipv6Addresses=[addr]), "InvalidParameterValue")
    assert addr in v6s(ec2, a)
    got = ec2.unassign_ipv6_addresses(NetworkInterfaceId=a, Ipv6Addresses=[addr],
                                      Ipv6Prefixes=[prefix])
    assert got["UnassignedIpv6Addresses"] == [addr]
    assert got["UnassignedIpv6Prefixes"] == [prefix]
    assert addr not in v6s(ec2, a) and v6_prefixes(ec2, a) == []
    assert addr not in upstream_v6s(cloud, a)
    snap = cloud.gate.owners()
    assert addr not in snap.ipv6s and prefix not in snap.ipv6_prefixes
    # Freed, each is anyone's again.
    ec2.assign_ipv6_addresses(NetworkInterfaceId=b, Ipv6Addresses=[addr], Ipv6Prefixes=[prefix])
    assert addr in v6s(ec2, b) and v6_prefixes(ec2, b) == [prefix]


def test_a_given_back_80_is_not_the_next_one_picked(v6):
    # EC2 picks a /80 at random among a /64's 65,536: one given back does not come straight
    # back. A build that drops the /80 under its pods and takes a new one must see its
    # pods' addresses leave the node, not the same /80 return a millisecond later.
    cloud, topo, ec2 = v6
    a, b = (i.primary_eni_id for i in topo.instances)
    (first,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=a,
                                         Ipv6PrefixCount=1)["AssignedIpv6Prefixes"]
    ec2.unassign_ipv6_addresses(NetworkInterfaceId=a, Ipv6Prefixes=[first])
    (second,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=a,
                                          Ipv6PrefixCount=1)["AssignedIpv6Prefixes"]
    (third,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=b,
                                         Ipv6PrefixCount=1)["AssignedIpv6Prefixes"]
    assert len({first, second, third}) == 3
    # Still anyone's when asked for by name.
    ec2.assign_ipv6_addresses(NetworkInterfaceId=b, Ipv6Prefixes=[first])
    assert first in v6_prefixes(ec2, b)


def test_bad_combinations_and_an_ipv4_only_subnet_are_refused(v6, gate_cloud):
    cloud, topo, ec2 = v6
    eni = topo.instances[0].primary_eni_id
    refused(lambda: ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6AddressCount=1,
                                              Ipv6Addresses=[host6(topo, 900)]),
            "InvalidParameterCombination")
    refused(lambda: ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6PrefixCount=1,
                                              Ipv6Prefixes=["2001:db8::/80"]),
            "InvalidParameterCombination")
    n = next(_numbers)
    v4 = gate_cloud.bootstrap(nodes=1, vpc_cidr=f"10.{n}.0.0/16", subnet_cidr=f"10.{n}.1.0/24")
    assert "no IPv6" in refused(lambda: ec2.assign_ipv6_addresses(
        NetworkInterfaceId=v4.instances[0].primary_eni_id, Ipv6AddressCount=1),
        "InvalidParameterValue")
    assert v4.instances[0].primary_ipv6 is None


def test_create_network_interface_takes_ipv6_as_asked_or_by_the_subnet(v6):
    cloud, topo, ec2 = v6
    auto = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]
    assert len(auto["Ipv6Addresses"]) == 1  # AssignIpv6AddressOnCreation
    asked = ec2.create_network_interface(SubnetId=topo.subnet_id, Ipv6AddressCount=3,
                                         Ipv6PrefixCount=1)["NetworkInterface"]
    assert len(asked["Ipv6Addresses"]) == 3 and len(asked["Ipv6Prefixes"]) == 1
    taken = auto["Ipv6Addresses"][0]["Ipv6Address"]
    before = cloud.gate.owners().version
    refused(lambda: ec2.create_network_interface(
        SubnetId=topo.subnet_id, Ipv6Addresses=[{"Ipv6Address": taken}]),
        "InvalidParameterValue")
    assert cloud.gate.owners().version == before
    mine = host6(topo, 4000)
    made = ec2.create_network_interface(SubnetId=topo.subnet_id,
                                        Ipv6Addresses=[{"Ipv6Address": mine}])
    eni = made["NetworkInterface"]["NetworkInterfaceId"]
    assert v6s(ec2, eni) == [mine] and upstream_v6s(cloud, eni) == [mine]
    found = ec2.describe_network_interfaces(Filters=[
        {"Name": "ipv6-addresses.ipv6-address", "Values": [mine]}])["NetworkInterfaces"]
    assert [e["NetworkInterfaceId"] for e in found] == [eni]


def test_prefixes_survive_a_resync_from_the_upstream(v6):
    cloud, topo, ec2 = v6
    eni = topo.instances[0].primary_eni_id
    (prefix,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=eni,
                                          Ipv6PrefixCount=1)["AssignedIpv6Prefixes"]
    cloud.gate.resync()  # moto knows nothing of the /80: the gate keeps it
    assert v6_prefixes(ec2, eni) == [prefix]
    assert v6s(ec2, eni) == [topo.instances[0].primary_ipv6]


def test_an_ipv6_only_subnet_does_not_break_the_gate(v6):
    cloud, topo, ec2 = v6
    block = list(ipaddress.IPv6Network(topo.vpc_ipv6_cidr).subnets(new_prefix=64))[9]
    sn = ec2.create_subnet(VpcId=topo.vpc_id, Ipv6Native=True, Ipv6CidrBlock=str(block),
                           AvailabilityZone=topo.az)["Subnet"]
    cloud.gate.resync()
    subnets = ec2.describe_subnets(SubnetIds=[sn["SubnetId"]])["Subnets"]
    assert subnets[0]["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"] == str(block)
    ec2.assign_ipv6_addresses(NetworkInterfaceId=topo.instances[0].primary_eni_id,
                              Ipv6AddressCount=1)  # the gate still serves


@pytest.mark.parametrize("kind, code, attrs", [
    ("throttle", "RequestLimitExceeded", {}),
    ("error", "InternalError", {}),
])
def test_ec2_faults_reach_the_ipv6_actions(v6, kind, code, attrs):
    cloud, topo, ec2 = v6
    eni = topo.instances[0].primary_eni_id
    for action in ("AssignIpv6Addresses", "UnassignIpv6Addresses"):
        fid = cloud.gate.faults.add(kind, target={"action": action}, **attrs)
        call = (lambda: ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6AddressCount=1)) \
            if action.startswith("Assign") else (lambda: ec2.unassign_ipv6_addresses(
                NetworkInterfaceId=eni, Ipv6Addresses=[topo.instances[0].primary_ipv6]))
        before = v6s(ec2, eni)
        with pytest.raises(ClientError) as exc:
            call()
        assert exc.value.response["Error"]["Code"] == code
        assert v6s(ec2, eni) == before
        cloud.gate.faults.remove(fid)


def test_a_lost_answer_still_assigns(v6):
    cloud, topo, ec2 = v6
    eni = topo.instances[0].primary_eni_id
    made = len([r for r in cloud.gate.audit.records() if r.action == "AssignIpv6Addresses"])
    cloud.gate.faults.add("lost-response", target={"action": "AssignIpv6Addresses"})
    with pytest.raises(ClientError):
        ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6AddressCount=1)
    cloud.gate.faults.clear()
    # Every try took effect (botocore retries a 500 once), only the answers were lost.
    tries = [r for r in cloud.gate.audit.records() if r.action == "AssignIpv6Addresses"][made:]
    assert len(tries) >= 1
    assert len(v6s(ec2, eni)) == 1 + len(tries)


@pytest.mark.slow
def test_the_aws_cli_assigns_and_unassigns_ipv6_through_the_gate(v6, tmp_path):
    cloud, topo, ec2 = v6
    aws = aws_cli()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
           "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}

    def run(*args: str) -> dict:
        r = subprocess.run([aws, "ec2", *args, "--region", cloud.region, "--endpoint-url",
                            cloud.endpoint, "--output", "json"], capture_output=True,
                           text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout) if r.stdout.strip() else {}

    eni = topo.instances[1].primary_eni_id
    got = run("assign-ipv6-addresses", "--network-interface-id", eni,
              "--ipv6-address-count", "2", "--ipv6-prefix-count", "1")
    assert len(got["AssignedIpv6Addresses"]) == 2 and len(got["AssignedIpv6Prefixes"]) == 1
    assert set(got["AssignedIpv6Addresses"]) <= set(v6s(ec2, eni))
    gone = got["AssignedIpv6Addresses"][0]
    out = run("unassign-ipv6-addresses", "--network-interface-id", eni,
              "--ipv6-addresses", gone)
    assert out["UnassignedIpv6Addresses"] == [gone]
    assert gone not in v6s(ec2, eni)


@pytest.mark.parametrize("kind", ["addresses-lag", "describe-lag"])
def test_a_lagging_describe_lags_the_ipv6_lists_too(v6, kind):
    cloud, topo, ec2 = v6
    eni = topo.instances[0].primary_eni_id
    cloud.gate.faults.add(kind, seconds=1.0)
    wait_for(lambda: listed(ec2, eni), 5, what="the lagging Describe showing the new VPC's ENI")
    (prefix,) = ec2.assign_ipv6_addresses(NetworkInterfaceId=eni,
                                          Ipv6PrefixCount=1)["AssignedIpv6Prefixes"]
    assert v6_prefixes(ec2, eni) == []  # Describe still shows the ENI as it was
    assert cloud.gate.owners().ipv6_prefixes[prefix].eni_id == eni  # the truth moved at once
    wait_for(lambda: v6_prefixes(ec2, eni) == [prefix], 5, what="Describe catching up")
    cloud.gate.faults.clear()


def test_an_interface_of_an_ipv6_only_subnet_has_ipv6_addresses_alone(v6):
    cloud, topo, ec2 = v6
    block = list(ipaddress.IPv6Network(topo.vpc_ipv6_cidr).subnets(new_prefix=64))[11]
    subnet = ec2.create_subnet(VpcId=topo.vpc_id, Ipv6Native=True, Ipv6CidrBlock=str(block),
                               AvailabilityZone=topo.az)["Subnet"]["SubnetId"]
    assert "IPv6-only" in refused(lambda: ec2.create_network_interface(
        SubnetId=subnet, PrivateIpAddress="10.0.9.9"), "InvalidParameterValue")
    made = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]
    eni = made["NetworkInterfaceId"]
    assert made.get("PrivateIpAddress") is None and made["PrivateIpAddresses"] == []
    (addr,) = v6s(ec2, eni)  # given one, as EC2 always does there
    assert ipaddress.IPv6Address(addr) in block
    ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=topo.instances[0].instance_id,
                                 DeviceIndex=1)
    cloud.gate.resync()  # moto gave the ENI an IPv4 of its own: never shown
    d = described(ec2, eni)
    assert d.get("PrivateIpAddress") is None and d["Ipv6Native"] is True
    info = cloud.gate.owners().enis[eni]
    assert info.ips == [] and info.ipv6s == [addr] and info.device_index == 1
    # No IPv4 address to give in an IPv6-only subnet.
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                    SecondaryPrivateIpAddressCount=1),
            "InsufficientFreeAddressesInSubnet")


def test_a_given_56_is_the_vpcs_and_its_subnets_take_64s_of_it(gate_cloud):
    """A VPC's /56 from an IPv6 pool (BYOIP): moto keeps none, the gate does."""
    ec2 = gate_cloud.client()
    n = next(_numbers)
    given = f"2600:1f18:{n:x}:ab00::/56"
    vpc = ec2.create_vpc(CidrBlock=f"10.{n}.0.0/16", Ipv6CidrBlock=given,
                         Ipv6Pool="ipv6pool-ec2-0123456789abcdef0")["Vpc"]
    shown = [a["Ipv6CidrBlock"] for a in vpc["Ipv6CidrBlockAssociationSet"]]
    assert shown == [given]
    described = ec2.describe_vpcs(VpcIds=[vpc["VpcId"]])["Vpcs"][0]
    (assoc,) = described["Ipv6CidrBlockAssociationSet"]
    assert assoc["Ipv6CidrBlock"] == given and assoc["Ipv6CidrBlockState"]["State"] == "associated"
    assert assoc["Ipv6Pool"] == "ipv6pool-ec2-0123456789abcdef0"
    inside = str(next(ipaddress.IPv6Network(given).subnets(new_prefix=64)))
    sn = ec2.create_subnet(VpcId=vpc["VpcId"], CidrBlock=f"10.{n}.1.0/24",
                           Ipv6CidrBlock=inside)["Subnet"]
    eni = ec2.create_network_interface(SubnetId=sn["SubnetId"],
                                       Ipv6AddressCount=1)["NetworkInterface"]
    assert ipaddress.IPv6Address(eni["Ipv6Addresses"][0]["Ipv6Address"]) in \
        ipaddress.IPv6Network(inside)
    refused(lambda: ec2.create_subnet(VpcId=vpc["VpcId"], CidrBlock=f"10.{n}.2.0/24",
                                      Ipv6CidrBlock="2001:db8:0:1::/64"), "InvalidSubnet.Range")
    refused(lambda: ec2.create_subnet(VpcId=vpc["VpcId"], CidrBlock=f"10.{n}.3.0/24",
                                      Ipv6CidrBlock=given), "InvalidParameterValue")
    refused(lambda: ec2.create_vpc(CidrBlock="10.250.0.0/16", Ipv6CidrBlock="2600:1f18::/48",
                                   Ipv6Pool="ipv6pool-ec2-0123456789abcdef0"),
            "InvalidParameterValue")
