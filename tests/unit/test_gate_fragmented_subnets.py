"""A fragmented subnet: prefix delegation refused with EC2's InsufficientCidrBlocks when no
aligned /28 (IPv4) or /80 (IPv6) is whole free, though single addresses are; and subnet CIDR
reservations, the other cause, honoured by the gate's picks. boto3 against the gate."""

from __future__ import annotations

import ipaddress
import itertools

import pytest

from tests.unit.ec2_support import refused

# EC2's words, as upstream VPC CNI logs them (aws/amazon-vpc-cni-k8s #1836, PR #1585).
NO_BLOCKS = "The specified subnet does not have enough free cidr blocks to satisfy the request."

_nets = itertools.count(200)


@pytest.fixture
def subnet(gate_upstream_cloud):
    """(ec2, subnet id, its /24, its /64): a dual-stack subnet of its own VPC, no instance."""
    cloud = gate_upstream_cloud
    n = next(_nets)
    topo = cloud.bootstrap(nodes=0, vpc_cidr=f"10.{n}.0.0/16", subnet_cidr=f"10.{n}.1.0/24",
                           ipv6=True)
    return (cloud.client(), topo.subnet_id, ipaddress.ip_network(topo.subnet_cidr),
            ipaddress.ip_network(topo.subnet_ipv6_cidr))


def new_eni(ec2, subnet_id: str, **kw) -> str:
    return ec2.create_network_interface(SubnetId=subnet_id, **kw)["NetworkInterface"][
        "NetworkInterfaceId"]


def blocks(net) -> list:
    return list(net.subnets(new_prefix=28))


def scatter(ec2, eni: str, net) -> list[str]:
    """One address taken in every /28 of the subnet that could be delegated (the first holds
    the reserved hosts, the last the broadcast address)."""
    taken = [str(b[5]) for b in blocks(net)[1:-1]]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=taken)
    return taken


def prefixes_of(answer) -> list[str]:
    return [p["Ipv4Prefix"] for p in answer["AssignedIpv4Prefixes"]]


def available(ec2, subnet_id: str) -> int:
    return ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["AvailableIpAddressCount"]


def test_scattered_addresses_leave_no_prefix_though_addresses_are_free(subnet):
    ec2, subnet_id, net, _ = subnet
    eni = new_eni(ec2, subnet_id)
    taken = scatter(ec2, eni, net)
    assert available(ec2, subnet_id) > 200  # most of the subnet is free, in pieces
    assert refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                           Ipv4PrefixCount=1),
                   "InsufficientCidrBlocks") == NO_BLOCKS
    refused(lambda: new_eni(ec2, subnet_id, Ipv4PrefixCount=1), "InsufficientCidrBlocks")
    # a single address is still given, and a named /28 holding one in use is refused
    one = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                          SecondaryPrivateIpAddressCount=1)
    assert len(one["AssignedPrivateIpAddresses"]) == 1
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                    Ipv4Prefixes=[str(blocks(net)[3])]),
            "InvalidParameterValue")
    # the one /28 whose address goes back is the one a prefix count gets
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[taken[6]])
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=1)
    assert prefixes_of(got) == [str(blocks(net)[7])]


def test_an_explicit_reservation_is_never_picked_for_a_count(subnet):
    ec2, subnet_id, net, _ = subnet
    low, high = net.subnets(new_prefix=25)
    r = ec2.create_subnet_cidr_reservation(SubnetId=subnet_id, Cidr=str(high),
                                           ReservationType="explicit")
    rid = r["SubnetCidrReservation"]["SubnetCidrReservationId"]
    eni = new_eni(ec2, subnet_id)
    taken = [str(b[5]) for b in list(low.subnets(new_prefix=28))[1:]]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=taken)
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                    Ipv4PrefixCount=1),
            "InsufficientCidrBlocks")
    # picked addresses stay out of the reservation; named ones may come from it
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                          SecondaryPrivateIpAddressCount=20)
    assert all(ipaddress.ip_address(a["PrivateIpAddress"]) in low
               for a in got["AssignedPrivateIpAddresses"])
    named = str(list(high.subnets(new_prefix=28))[2])
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4Prefixes=[named])
    assert prefixes_of(got) == [named]
    # once deleted, the rest of the range serves counts again
    ec2.delete_subnet_cidr_reservation(SubnetCidrReservationId=rid)
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=1)
    assert ipaddress.ip_network(prefixes_of(got)[0]).subnet_of(high)


def test_a_prefix_reservation_serves_prefixes_first_and_no_single_address(subnet):
    ec2, subnet_id, net, _ = subnet
    kept = list(net.subnets(new_prefix=27))[1]  # two /28s among the lowest addresses
    ec2.create_subnet_cidr_reservation(SubnetId=subnet_id, Cidr=str(kept),
                                       ReservationType="prefix")
    eni = new_eni(ec2, subnet_id)
    single = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                             SecondaryPrivateIpAddressCount=40)
    assert not any(ipaddress.ip_address(a["PrivateIpAddress"]) in kept
                   for a in single["AssignedPrivateIpAddresses"])
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=3)
    assert prefixes_of(got)[:2] == [str(b) for b in kept.subnets(new_prefix=28)]
    assert not ipaddress.ip_network(prefixes_of(got)[2]).subnet_of(kept)


def test_reservations_ask_for_a_known_subnet_and_type(subnet):
    ec2, subnet_id, net, _ = subnet
    refused(lambda: ec2.create_subnet_cidr_reservation(
        SubnetId=subnet_id, Cidr=str(blocks(net)[1]), ReservationType="sometimes"),
        "InvalidParameterValue")
    refused(lambda: ec2.create_subnet_cidr_reservation(
        SubnetId="subnet-0000000000000000f", Cidr=str(blocks(net)[1]),
        ReservationType="explicit"), "InvalidSubnetID.NotFound")


def test_no_free_80_refuses_an_ipv6_prefix_though_addresses_are_free(subnet):
    ec2, subnet_id, _, net6 = subnet
    # the /64 less its first /80, reserved for explicit use: /65, /66, ... /80 halves
    last = net6
    for size in range(65, 81):
        low, high = last.subnets(new_prefix=size)
        ec2.create_subnet_cidr_reservation(SubnetId=subnet_id, Cidr=str(high),
                                           ReservationType="explicit")
        last = low
    eni = new_eni(ec2, subnet_id)
    held = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
    if not held.get("Ipv6Addresses"):  # one address in the free /80 makes it not whole
        ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6AddressCount=1)
    assert refused(lambda: ec2.assign_ipv6_addresses(NetworkInterfaceId=eni,
                                                     Ipv6PrefixCount=1),
                   "InsufficientCidrBlocks") == NO_BLOCKS
    got = ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6AddressCount=2)
    assert all(ipaddress.ip_address(a) in last for a in got["AssignedIpv6Addresses"])
