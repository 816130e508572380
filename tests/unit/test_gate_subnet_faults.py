"""DescribeSubnets faults on the gate, boto3 and the fault API over HTTP against moto: a
subnet DescribeSubnets cannot see (upstream #3753's cross-account subnet) and a role that
may not describe subnets."""

from __future__ import annotations

import pytest

from cnikit.cloud.cloud import SUBNET_DISCOVERY_TAG
from tests.unit.ec2_support import refused


@pytest.fixture
def faults(gate_fault_vpc):
    from fault_imds.client import FaultClient

    cloud, topo = gate_fault_vpc
    n = topo.vpc_cidr.split(".")[1]
    other = cloud.add_subnet(topo, f"10.{n}.2.0/24", {SUBNET_DISCOVERY_TAG: "1"})
    return cloud, topo, other, FaultClient(cloud.endpoint + "/_cnikit")


def in_vpc(topo) -> list[dict]:
    return [{"Name": "vpc-id", "Values": [topo.vpc_id]},
            {"Name": "availability-zone", "Values": [topo.az]}]


def test_a_subnet_not_found_by_id_by_filter_and_in_a_listing(faults):
    cloud, topo, other, fc = faults
    ec2 = cloud.client()
    assert len(ec2.describe_subnets(Filters=in_vpc(topo))["Subnets"]) == 2
    with fc.add("subnet-not-found", subnet=other):
        message = refused(lambda: ec2.describe_subnets(SubnetIds=[other]),
                          "InvalidSubnetID.NotFound")
        assert message == f"The subnet ID '{other}' does not exist"
        refused(lambda: ec2.describe_subnets(
            Filters=[{"Name": "subnet-id", "Values": [other]}]), "InvalidSubnetID.NotFound")
        refused(lambda: ec2.describe_subnets(Filters=in_vpc(topo)), "InvalidSubnetID.NotFound")
        # the nodes' own subnet is still seen, and other actions are served
        assert [s["SubnetId"] for s in ec2.describe_subnets(
            SubnetIds=[topo.subnet_id])["Subnets"]] == [topo.subnet_id]
        ec2.describe_network_interfaces(NetworkInterfaceIds=[topo.instances[0].primary_eni_id])
    assert len(ec2.describe_subnets(Filters=in_vpc(topo))["Subnets"]) == 2
    with fc.add("subnet-not-found"):  # no subnet named: whichever the call asks for
        assert refused(lambda: ec2.describe_subnets(SubnetIds=[topo.subnet_id]),
                       "InvalidSubnetID.NotFound") == \
            f"The subnet ID '{topo.subnet_id}' does not exist"


def test_describe_subnets_denied_answers_403_and_nothing_else(faults):
    cloud, topo, _, fc = faults
    ec2 = cloud.client()
    with fc.add("subnet-access-denied", target={"action": "DescribeSubnets"}):
        message = refused(lambda: ec2.describe_subnets(Filters=in_vpc(topo)),
                          "UnauthorizedOperation", status=403)
        assert message == "You are not authorized to perform this operation."
        ec2.describe_instances(InstanceIds=[topo.instances[0].instance_id])
    assert ec2.describe_subnets(SubnetIds=[topo.subnet_id])["Subnets"]


@pytest.mark.parametrize("kind", ["subnet-not-found", "subnet-access-denied"])
def test_a_target_on_another_action_is_refused_in_one_line(faults, kind):
    from fault_imds.client import FaultError

    _, _, _, fc = faults
    with pytest.raises(FaultError) as exc:
        fc.add(kind, target={"action": "DescribeInstances"})
    assert f"kind {kind!r} answers only DescribeSubnets, not DescribeInstances" in str(exc.value)
    assert "\n" not in str(exc.value) and fc.list() == []


def test_a_bad_subnet_is_refused_in_one_line(faults):
    from fault_imds.client import FaultError

    _, _, _, fc = faults
    with pytest.raises(FaultError, match="subnet must be a subnet id"):
        fc.add("subnet-not-found", subnet="eni-1")
