"""ENI trunking through the gate (security groups for pods): trunk ENIs
(CreateNetworkInterface's InterfaceType), branch ENIs associated with them under VLAN ids
(AssociateTrunkInterface and its relatives), EC2's rules and limits for both, and the
ownership snapshot's view of them. boto3, botocore's parser and the AWS CLI are the clients.

The upstream models no trunking (moto answers none of the trunk actions), so the gate
answers them from its mirror; each rule runs against every upstream, as the other gate
rules do.
"""

from __future__ import annotations

import re

import pytest
import urllib3
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError

from cnikit.cloud.limits import BRANCH_INTERFACES
from tests.unit.ec2_support import aws_ec2, refused

FORM = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}


def new_eni(ec2, topo, **kw) -> str:
    return ec2.create_network_interface(SubnetId=topo.subnet_id, **kw)[
        "NetworkInterface"]["NetworkInterfaceId"]


def trunk_on(ec2, topo, node: int = 0, device: int = 1) -> str:
    """A trunk ENI made and attached to node `node` (as the resource controller does)."""
    trunk = new_eni(ec2, topo, InterfaceType="trunk")
    ec2.attach_network_interface(NetworkInterfaceId=trunk, DeviceIndex=device,
                                 InstanceId=topo.instances[node].instance_id)
    return trunk


def eni_type(ec2, eni_id: str) -> str:
    return ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])[
        "NetworkInterfaces"][0]["InterfaceType"]


def typed(ec2, topo, kind: str) -> set[str]:
    found = ec2.describe_network_interfaces(Filters=[
        {"Name": "interface-type", "Values": [kind]},
        {"Name": "vpc-id", "Values": [topo.vpc_id]}])["NetworkInterfaces"]
    return {e["NetworkInterfaceId"] for e in found}


def associations(ec2, **kw) -> list[dict]:
    return ec2.describe_trunk_interface_associations(**kw)["InterfaceAssociations"]


def on_trunk(ec2, trunk: str) -> list[dict]:
    return associations(ec2, Filters=[{"Name": "trunk-interface-association.trunk-interface-id",
                                       "Values": [trunk]}])


def test_a_trunk_is_made_attached_and_described_as_one(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    made = ec2.create_network_interface(SubnetId=topo.subnet_id, InterfaceType="trunk")
    trunk = made["NetworkInterface"]["NetworkInterfaceId"]
    assert made["NetworkInterface"]["InterfaceType"] == "trunk"
    plain = new_eni(ec2, topo)
    assert typed(ec2, topo, "trunk") == {trunk}
    assert plain in typed(ec2, topo, "interface") and trunk not in typed(ec2, topo, "interface")
    ec2.attach_network_interface(NetworkInterfaceId=trunk, DeviceIndex=1,
                                 InstanceId=topo.instances[0].instance_id)
    cloud.gate.resync()  # the upstream shows "interface": the gate's type survives a reload
    assert eni_type(ec2, trunk) == "trunk" and eni_type(ec2, plain) == "interface"
    assert cloud.gate.owners().enis[trunk].interface_type == "trunk"


def test_trunks_need_the_account_setting_and_a_trunking_instance_type(gate_vpc, gate_new_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    # EC2 makes a branch by association only: CreateNetworkInterface never takes the type.
    assert "InterfaceType" in refused(lambda: new_eni(ec2, topo, InterfaceType="branch"),
                                      "InvalidParameterValue")
    cloud.gate.trunking = False
    try:
        before = len(ec2.describe_network_interfaces()["NetworkInterfaces"])
        refused(lambda: new_eni(ec2, topo, InterfaceType="trunk"), "UnsupportedOperation")
        assert len(ec2.describe_network_interfaces()["NetworkInterfaces"]) == before
    finally:
        cloud.gate.trunking = True
    small = gate_new_vpc(cloud, nodes=1, instance_type="t3.small")
    assert "t3.small" not in BRANCH_INTERFACES
    trunk = new_eni(ec2, small, InterfaceType="trunk")
    assert "t3.small" in refused(lambda: ec2.attach_network_interface(
        NetworkInterfaceId=trunk, DeviceIndex=1, InstanceId=small.instances[0].instance_id),
        "UnsupportedOperation")
    assert cloud.gate.owners().enis[trunk].instance_id is None
    trunk_on(ec2, topo)
    second = new_eni(ec2, topo, InterfaceType="trunk")
    refused(lambda: ec2.attach_network_interface(
        NetworkInterfaceId=second, DeviceIndex=2, InstanceId=topo.instances[0].instance_id),
        "InvalidParameterValue")


def test_a_branch_joins_its_trunk_under_a_vlan_and_leaves_it(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    trunk = trunk_on(ec2, topo, node=1)
    branch = new_eni(ec2, topo)
    got = ec2.associate_trunk_interface(BranchInterfaceId=branch, TrunkInterfaceId=trunk,
                                        VlanId=1, ClientToken="pod-a")
    assoc = got["InterfaceAssociation"]
    assert re.fullmatch(r"trunk-assoc-[0-9a-f]{17}", assoc["AssociationId"])
    assert (assoc["BranchInterfaceId"], assoc["TrunkInterfaceId"], assoc["InterfaceProtocol"],
            assoc["VlanId"]) == (branch, trunk, "VLAN", 1)
    assert got["ClientToken"] == "pod-a"
    assert on_trunk(ec2, trunk) == [assoc]
    assert associations(ec2, AssociationIds=[assoc["AssociationId"]]) == [assoc]
    assert eni_type(ec2, branch) == "branch" and branch in typed(ec2, topo, "branch")
    snap = cloud.gate.owners()
    info = snap.enis[branch]
    assert (info.interface_type, info.trunk_eni_id, info.vlan_id, info.association_id) == (
        "branch", trunk, 1, assoc["AssociationId"])
    # A branch is attached to no instance; it reaches the trunk's.
    assert info.instance_id is None
    assert snap.reached_instance(branch) == topo.instances[1].instance_id
    done = [r for r in cloud.gate.audit.records() if r.action == "AssociateTrunkInterface"]
    assert done[-1].eni_id == branch and done[-1].instance_id == topo.instances[1].instance_id
    assert ec2.disassociate_trunk_interface(AssociationId=assoc["AssociationId"])["Return"]
    assert on_trunk(ec2, trunk) == [] and eni_type(ec2, branch) == "interface"
    assert cloud.gate.owners().enis[branch].trunk_eni_id is None
    for call in (lambda: ec2.disassociate_trunk_interface(AssociationId=assoc["AssociationId"]),
                 lambda: associations(ec2, AssociationIds=[assoc["AssociationId"]])):
        refused(call, "InvalidAssociationID.NotFound")


def test_associations_follow_ec2s_rules(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    trunk, other_trunk = trunk_on(ec2, topo, node=0), trunk_on(ec2, topo, node=1)
    branch, free = new_eni(ec2, topo), new_eni(ec2, topo)
    ec2.associate_trunk_interface(BranchInterfaceId=branch, TrunkInterfaceId=trunk, VlanId=7)
    before = associations(ec2)

    def associate(branch_id, trunk_id=trunk, **kw):
        return lambda: ec2.associate_trunk_interface(BranchInterfaceId=branch_id,
                                                     TrunkInterfaceId=trunk_id, **kw)

    unattached = new_eni(ec2, topo, InterfaceType="trunk")
    cases = [
        (associate(free, free, VlanId=8), "InvalidParameterValue", "not a trunk"),
        (associate(branch, VlanId=8), "InvalidNetworkInterface.InUse", "already associated"),
        (associate(free, VlanId=7), "InvalidParameterValue", "already in use"),
        (associate(free, VlanId=0), "InvalidParameterValue", "VlanId"),
        (associate(free, VlanId=4095), "InvalidParameterValue", "VlanId"),
        (associate(topo.instances[0].primary_eni_id, VlanId=8), "InvalidNetworkInterface.InUse",
         "in use"),
        (associate(other_trunk, VlanId=8), "InvalidParameterValue", "trunk interface"),
        (associate(free, unattached, VlanId=8), "IncorrectState", "not attached"),
        (associate(free, VlanId=8, GreKey=8), "InvalidParameterCombination", "not both"),
        (associate(free), "MissingParameter", "VlanId"),
        (associate("eni-0000000000000000f", VlanId=8), "InvalidNetworkInterfaceID.NotFound",
         "eni-0000000000000000f"),
        (associate(free, "eni-0000000000000000e", VlanId=8),
         "InvalidNetworkInterfaceID.NotFound", "eni-0000000000000000e"),
    ]
    for call, code, words in cases:
        assert words in refused(call, code), (code, words)
    assert associations(ec2) == before and eni_type(ec2, free) == "interface"
    # A VLAN id is unique per trunk, not per VPC.
    ec2.associate_trunk_interface(BranchInterfaceId=free, TrunkInterfaceId=other_trunk, VlanId=7)
    # A branch never attaches to an instance: it reaches one through its trunk.
    refused(lambda: ec2.attach_network_interface(NetworkInterfaceId=branch, DeviceIndex=2,
                                                 InstanceId=topo.instances[0].instance_id),
            "InvalidNetworkInterface.InUse")


def test_a_trunk_carries_as_many_branches_as_its_instance_type_allows(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    trunk = trunk_on(ec2, topo)
    limit = BRANCH_INTERFACES["m5.large"]
    for vlan in range(1, limit + 1):
        ec2.associate_trunk_interface(BranchInterfaceId=new_eni(ec2, topo),
                                      TrunkInterfaceId=trunk, VlanId=vlan)
    extra = new_eni(ec2, topo)
    assert "m5.large" in refused(lambda: ec2.associate_trunk_interface(
        BranchInterfaceId=extra, TrunkInterfaceId=trunk, VlanId=limit + 1),
        "AttachmentLimitExceeded")
    assert len(on_trunk(ec2, trunk)) == limit and eni_type(ec2, extra) == "interface"
    pages = ec2.get_paginator("describe_trunk_interface_associations").paginate(
        Filters=[{"Name": "trunk-interface-association.trunk-interface-id", "Values": [trunk]}],
        PaginationConfig={"PageSize": 5})
    assert sorted(a["VlanId"] for p in pages for a in p["InterfaceAssociations"]) == list(
        range(1, limit + 1))


def test_deleting_a_branch_or_its_trunk_ends_the_association(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    trunk = trunk_on(ec2, topo)
    gone, left = new_eni(ec2, topo), new_eni(ec2, topo)
    for vlan, branch in enumerate((gone, left), 1):
        ec2.associate_trunk_interface(BranchInterfaceId=branch, TrunkInterfaceId=trunk,
                                      VlanId=vlan)
    ec2.delete_network_interface(NetworkInterfaceId=gone)
    assert [a["BranchInterfaceId"] for a in on_trunk(ec2, trunk)] == [left]
    att = ec2.describe_network_interfaces(NetworkInterfaceIds=[trunk])[
        "NetworkInterfaces"][0]["Attachment"]["AttachmentId"]
    ec2.detach_network_interface(AttachmentId=att)
    assert len(on_trunk(ec2, trunk)) == 1  # a detached trunk keeps its branches
    ec2.delete_network_interface(NetworkInterfaceId=trunk)
    # The branch is left in the VPC as a plain interface (upstream #3018's leaked ENIs).
    assert on_trunk(ec2, trunk) == [] and eni_type(ec2, left) == "interface"


def test_the_gate_answers_what_the_upstream_cannot(gate_cloud, gate_new_vpc):
    """moto answers none of the trunk actions (a 500 botocore cannot parse), so the gate
    answers them, DryRun included, rather than forwarding them."""
    topo = gate_new_vpc(gate_cloud, nodes=1)
    ec2, raw = gate_cloud.client(), gate_cloud.client(endpoint=gate_cloud.upstream_url)
    raw.meta.events.register("needs-retry.ec2.*", lambda **_: None)
    with pytest.raises((ResponseParserError, ClientError)):
        raw.describe_trunk_interface_associations()
    trunk = trunk_on(ec2, topo)
    branch = new_eni(ec2, topo)
    refused(lambda: ec2.associate_trunk_interface(BranchInterfaceId=branch,
                                                  TrunkInterfaceId=trunk, VlanId=3, DryRun=True),
            "DryRunOperation", 412)
    assert on_trunk(ec2, trunk) == []
    # The answer itself: EC2's namespace and shape, as botocore's parser reads it.
    resp = urllib3.request("POST", gate_cloud.endpoint + "/", headers=FORM, body=(
        f"Action=AssociateTrunkInterface&Version=2016-11-15&BranchInterfaceId={branch}"
        f"&TrunkInterfaceId={trunk}&VlanId=3"))
    assert resp.status == 200, resp.data
    assert re.fullmatch(
        rb'<\?xml version="1.0" encoding="UTF-8"\?>\n<AssociateTrunkInterfaceResponse '
        rb'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>[0-9a-f-]{36}</requestId>'
        rb"<interfaceAssociation><associationId>trunk-assoc-[0-9a-f]{17}</associationId>"
        rb"<branchInterfaceId>" + branch.encode() + rb"</branchInterfaceId><trunkInterfaceId>"
        + trunk.encode() + rb"</trunkInterfaceId><interfaceProtocol>VLAN</interfaceProtocol>"
        rb"<vlanId>3</vlanId><tagSet/></interfaceAssociation></AssociateTrunkInterfaceResponse>",
        resp.data), resp.data
    refused(lambda: associations(ec2, Filters=[{"Name": "no-such-filter", "Values": ["x"]}]),
            "InvalidParameterValue")
    refused(lambda: associations(ec2, MaxResults=256), "InvalidParameterValue")


@pytest.mark.slow
def test_the_aws_cli_makes_a_trunk_and_a_branch(gate_cloud, gate_new_vpc, tmp_path):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    run = aws_ec2(gate_cloud.endpoint, gate_cloud.region, tmp_path)
    trunk = run("create-network-interface", "--subnet-id", topo.subnet_id,
                "--interface-type", "trunk")["NetworkInterface"]
    assert trunk["InterfaceType"] == "trunk"
    run("attach-network-interface", "--network-interface-id", trunk["NetworkInterfaceId"],
        "--instance-id", topo.instances[0].instance_id, "--device-index", "1")
    branch = run("create-network-interface", "--subnet-id", topo.subnet_id)[
        "NetworkInterface"]["NetworkInterfaceId"]
    assoc = run("associate-trunk-interface", "--branch-interface-id", branch,
                "--trunk-interface-id", trunk["NetworkInterfaceId"], "--vlan-id", "42")[
        "InterfaceAssociation"]
    listed = run("describe-trunk-interface-associations", "--association-ids",
                 assoc["AssociationId"])["InterfaceAssociations"]
    assert listed == [assoc] and assoc["VlanId"] == 42
    branches = run("describe-network-interfaces", "--filters",
                   "Name=interface-type,Values=branch", f"Name=vpc-id,Values={topo.vpc_id}")[
        "NetworkInterfaces"]
    assert [e["NetworkInterfaceId"] for e in branches] == [branch]
    assert run("disassociate-trunk-interface", "--association-id",
               assoc["AssociationId"])["Return"] is True
