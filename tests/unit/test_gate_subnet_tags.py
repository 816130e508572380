"""Subnet tags as EKS's subnet discovery reads them (`kubernetes.io/role/cni`): made by the
kit's bootstrap, answered by the gate's DescribeSubnets under tag filters, parsed by
botocore as a build's SDK parses them."""

from __future__ import annotations

from cnikit.cloud.cloud import SUBNET_DISCOVERY_TAG


def subnet_ids(ec2, *filters) -> set[str]:
    found = ec2.describe_subnets(Filters=list(filters))["Subnets"]
    return {s["SubnetId"] for s in found}


def test_describe_subnets_filters_by_the_discovery_tag(gate_upstream_cloud):
    cloud = gate_upstream_cloud
    ec2 = cloud.client()
    on = cloud.bootstrap(nodes=0, vpc_cidr="10.231.0.0/16", subnet_cidr="10.231.1.0/24",
                         subnet_tags={SUBNET_DISCOVERY_TAG: "1"})
    off = cloud.bootstrap(nodes=0, vpc_cidr="10.232.0.0/16", subnet_cidr="10.232.1.0/24",
                          subnet_tags={SUBNET_DISCOVERY_TAG: "0"})
    plain = cloud.bootstrap(nodes=0, vpc_cidr="10.233.0.0/16", subnet_cidr="10.233.1.0/24")
    ours = {on.subnet_id, off.subnet_id, plain.subnet_id}
    tagged = subnet_ids(ec2, {"Name": f"tag:{SUBNET_DISCOVERY_TAG}", "Values": ["1"]})
    assert tagged & ours == {on.subnet_id}
    assert subnet_ids(ec2, {"Name": f"tag:{SUBNET_DISCOVERY_TAG}", "Values": ["0"]}) & ours \
        == {off.subnet_id}
    assert subnet_ids(ec2, {"Name": "tag-key", "Values": [SUBNET_DISCOVERY_TAG]}) & ours \
        == {on.subnet_id, off.subnet_id}
    # with the VPC's filter too, as a node asks for its own VPC's subnets
    assert subnet_ids(ec2, {"Name": "vpc-id", "Values": [on.vpc_id]},
                      {"Name": f"tag:{SUBNET_DISCOVERY_TAG}", "Values": ["1"]}) \
        == {on.subnet_id}
    found = ec2.describe_subnets(SubnetIds=[on.subnet_id])["Subnets"][0]
    assert {"Key": SUBNET_DISCOVERY_TAG, "Value": "1"} in found["Tags"]
    assert found["AvailableIpAddressCount"] == 251
