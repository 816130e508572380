"""The reference daemon's subnet discovery (cnikit/daemon/subnets.py) against moto behind the
gate: which subnet of the node's AZ a new ENI goes to, per profile; a full subnet; a
DescribeSubnets that fails."""

from __future__ import annotations

import pytest

from cnikit.cloud.cloud import SUBNET_DISCOVERY_TAG as TAG
from cnikit.daemon.apis import ApiError
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config
from cnikit.daemon.ec2_query import QueryEc2
from cnikit.daemon.fakes import FakeEc2
from cnikit.daemon.ipamd import IpamD
from tests.unit.daemon_support import make

UPSTREAM = "vpc-cni-1.18.4"


@pytest.fixture
def vpc(gate_cloud, gate_new_vpc):
    """(cloud, topology, subnets by name): the nodes' subnet (a /24, untagged) and, in its
    AZ, `one` (a /25 tagged 1), `zero` (a /23 tagged 0: the most free addresses) and
    `bare` (a /22, untagged)."""
    topo = gate_new_vpc(gate_cloud, nodes=1)
    n = topo.vpc_cidr.split(".")[1]
    subnets = {"own": topo.subnet_id,
               "one": gate_cloud.add_subnet(topo, f"10.{n}.2.0/25", {TAG: "1"}),
               "zero": gate_cloud.add_subnet(topo, f"10.{n}.4.0/23", {TAG: "0"}),
               "bare": gate_cloud.add_subnet(topo, f"10.{n}.8.0/22")}
    yield gate_cloud, topo, subnets
    gate_cloud.gate.faults.clear()


def daemon(cloud, topo, profile: str, **cfg) -> IpamD:
    d = IpamD(Config(profile=profile, **cfg), QueryEc2(cloud.endpoint, cloud.region), None,
              FakeClock())
    d.instance = d.ec2.describe_instance(topo.instances[0].instance_id)
    return d


def new_eni_subnet(cloud, d: IpamD) -> str:
    view = d._create_eni({"t": "1"}, 1)
    return cloud.client().describe_network_interfaces(NetworkInterfaceIds=[view.eni_id])[
        "NetworkInterfaces"][0]["SubnetId"]


def names(subnets: dict[str, str], ids) -> list[str]:
    by_id = {v: k for k, v in subnets.items()}
    return [by_id[i] for i, _ in ids]


def test_tagged_subnets_most_free_first_as_each_profile_reads_the_tag(vpc):
    cloud, topo, subnets = vpc
    from cnikit.daemon import subnets as choice

    # before v1.22.0 the tag's key alone opts a subnet in, "0" too; hardened reads its value
    assert names(subnets, choice.candidates(daemon(cloud, topo, UPSTREAM))) == \
        ["zero", "own", "one"]
    assert names(subnets, choice.candidates(daemon(cloud, topo, "hardened"))) == ["own", "one"]
    assert new_eni_subnet(cloud, daemon(cloud, topo, UPSTREAM)) == subnets["zero"]
    hardened = daemon(cloud, topo, "hardened")
    assert new_eni_subnet(cloud, hardened) == subnets["own"]
    # with discovery off, the node's own subnet whatever the tags
    off = daemon(cloud, topo, UPSTREAM, subnet_discovery=False)
    assert new_eni_subnet(cloud, off) == subnets["own"]


def test_the_nodes_subnet_tagged_zero_is_left_by_hardened_only(vpc):
    cloud, topo, subnets = vpc
    cloud.client().create_tags(Resources=[subnets["own"]], Tags=[{"Key": TAG, "Value": "0"}])
    hardened = daemon(cloud, topo, "hardened")
    assert new_eni_subnet(cloud, hardened) == subnets["one"]
    # its route table's router is the new ENI's subnet's, not the node's
    eni = next(iter(hardened.eni_cidrs))
    assert hardened.eni_subnet_cidr(eni) == topo.vpc_cidr.replace(".0.0/16", ".2.0/25")
    cloud.client().create_tags(Resources=[subnets["one"]], Tags=[{"Key": TAG, "Value": "0"}])
    with pytest.raises(ApiError) as exc:
        hardened._create_eni({"t": "1"}, 1)
    assert exc.value.code == "NoUsableSubnet"
    assert new_eni_subnet(cloud, daemon(cloud, topo, UPSTREAM)) == subnets["zero"]


def test_a_full_subnet_refuses_and_the_next_tagged_one_is_tried(vpc):
    cloud, topo, subnets = vpc
    ec2 = cloud.client()
    # another principal reserves all of `bare`, the largest: EC2 still counts it free
    bare = topo.vpc_cidr.replace(".0.0/16", ".8.0/22")
    ec2.create_subnet_cidr_reservation(SubnetId=subnets["bare"], Cidr=bare,
                                       ReservationType="explicit")
    ec2.create_tags(Resources=[subnets["bare"]], Tags=[{"Key": TAG, "Value": "1"}])
    d = daemon(cloud, topo, "hardened")
    from cnikit.daemon import subnets as choice

    assert names(subnets, choice.candidates(d)) == ["bare", "own", "one"]
    assert new_eni_subnet(cloud, d) == subnets["own"]
    creates = [r.outcome for r in cloud.gate.audit.records()
               if r.action == "CreateNetworkInterface"]
    assert creates[-2:] == ["InsufficientFreeAddressesInSubnet", "ok"], creates
    # nowhere else to go: EC2's refusal is the daemon's error
    ec2.create_tags(Resources=[subnets["own"], subnets["one"]],
                    Tags=[{"Key": TAG, "Value": "0"}])
    with pytest.raises(ApiError) as exc:
        d._create_eni({"t": "1"}, 1)
    assert exc.value.code == "InsufficientFreeAddressesInSubnet"


@pytest.mark.parametrize("kind", ["subnet-access-denied", "subnet-not-found"])
def test_describe_subnets_failing_falls_back_to_the_nodes_subnet(vpc, kind):
    cloud, topo, subnets = vpc
    cloud.gate.faults.add(kind)
    d = daemon(cloud, topo, "hardened")
    assert new_eni_subnet(cloud, d) == subnets["own"]
    assert [e for e in d.events if e.get("kind") == "subnet-discovery-failed"]


def test_an_assign_refused_for_a_full_subnet_makes_an_eni_elsewhere():
    """Upstream's increaseIPPool with discovery on: InsufficientFreeAddressesInSubnet on
    Assign passes to the next ENI, then to a new ENI; without discovery it waits."""
    for discovery, creates in ((True, 1), (False, 0)):
        ec2 = FakeEc2()
        ec2.fail["assign_ips"] = "InsufficientFreeAddressesInSubnet"
        make(ec2=ec2, subnet_discovery=discovery, warm_ip_target=5)  # start-up's pool step
        assert ec2.calls.count("assign_ips") == 1
        assert ec2.calls.count("create_eni") == creates, discovery
