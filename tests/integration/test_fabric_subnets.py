"""Pods whose ENI sits in another subnet of the VPC than their node's (subnet discovery puts
new ENIs there): the fabric routes by EC2's ownership whatever the subnet, and an ENI's
route table goes by its own subnet's router."""

from __future__ import annotations

import pytest

from cnikit.fabric import routes
from tests.integration.conftest import needs_root, wait_until
from tests.integration.test_fabric_pods import all_reach

pytestmark = [pytest.mark.root, needs_root]


def test_pods_on_an_eni_in_another_subnet_reach_the_nodes_subnet(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=2)
    topo = fabric.topo
    n = topo.vpc_cidr.split(".")[1]
    other_cidr = f"10.{n}.64.0/24"
    other = fab_cloud.add_subnet(topo, other_cidr, {"kubernetes.io/role/cni": "1"})
    ec2 = fab_cloud.client()
    eni = ec2.create_network_interface(SubnetId=other, SecondaryPrivateIpAddressCount=2)[
        "NetworkInterface"]
    ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                 InstanceId=fabric.node(0).instance_id, DeviceIndex=1)
    away = [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"] if not a["Primary"]]
    home = ec2.assign_private_ip_addresses(
        NetworkInterfaceId=topo.instances[1].primary_eni_id,
        SecondaryPrivateIpAddressCount=1)["AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
    assert fabric.wait_synced(fab_cloud.gate.owners().version, 10)
    pods = [fabric.add_pod(0, ip) for ip in away] + [fabric.add_pod(1, home)]
    assert [p.device_index for p in pods] == [1, 1, 0]
    # the node's table for eth1 goes by the other subnet's router
    table = [r for r in fabric.node(0).ns.nl.routes(table=2) if r.dst == "default"]
    assert [r.gateway for r in table] == [routes.router_of(other_cidr)], table
    wait_until(lambda: all_reach(pods), 3.0, what="pods of both subnets reaching each other")
