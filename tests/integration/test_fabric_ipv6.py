"""The dual-stack VPC in namespaces: IPv6 pods are routed by EC2's ownership of their
address or /80, with EC2's source/dest check, and nodes reach the IMDS's IPv6 endpoint."""

from __future__ import annotations

import http.client
import ipaddress
import itertools
import socket

import pytest

from cnikit.fabric import names, netns, routes
from cnikit.fabric.topology import Fabric
from tests.integration.conftest import needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]
_numbers = itertools.count(200)


@pytest.fixture
def dual_fabric(fab_cloud):
    """make(nodes, imds=None) -> a started dual-stack Fabric, closed after the test."""
    made = []

    def make(nodes: int = 2, imds=None) -> Fabric:
        k = next(_numbers)
        topo = fab_cloud.bootstrap(nodes=nodes, vpc_cidr=f"10.{k}.0.0/16",
                                   subnet_cidr=f"10.{k}.1.0/24", ipv6=True)
        fabric = Fabric(fab_cloud, topo, imds=imds).start()
        made.append(fabric)
        return fabric

    yield make
    for fabric in made:
        fabric.close()


def delegate(cloud, fabric, node: int) -> ipaddress.IPv6Network:
    """A /80 on the node's primary ENI, as the VPC CNI's IPv6 mode takes one; once the
    fabric routes it."""
    eni = fabric.topo.instances[node].primary_eni_id
    got = cloud.client().assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6PrefixCount=1)
    prefix = got["AssignedIpv6Prefixes"][0]
    assert fabric.wait_synced(cloud.gate.owners().version)
    return ipaddress.IPv6Network(prefix)


def reach6(src, dst, timeout: float = 0.3) -> bool:
    with netns.entered(dst.ns.fd):
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with netns.entered(src.ns.fd):
        tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("::", 9996))
        rx.settimeout(timeout)
        tx.sendto(b"x", (dst.ip, 9996))
        try:
            return rx.recvfrom(8)[1][0] == src.ip
        except TimeoutError:
            return False


def routed_to(fabric, net: ipaddress.IPv6Network) -> int | None:
    """The node whose primary ENI's link the VPC's kernel routes `net` through, read back
    from the vpc namespace."""
    oif = next((r.oif for r in fabric.vpc.nl.routes(family=socket.AF_INET6)
                if r.dst == str(net)), None)
    return next((n for n in range(len(fabric.nodes))
                 if fabric.vpc.nl.link_index(names.vpc_link(fabric.rid, n, 0)) == oif), None)


def test_ipv6_pods_on_two_nodes_reach_each_other_through_their_prefixes(dual_fabric, fab_cloud):
    fabric = dual_fabric(nodes=2)
    nets = [delegate(fab_cloud, fabric, n) for n in range(2)]
    assert routed_to(fabric, nets[0]) == 0
    a = fabric.add_pod(0, str(nets[0][5]))
    b = fabric.add_pod(1, str(nets[1][9]))
    wait_until(lambda: reach6(a, b) and reach6(b, a), 3.0, what="the pods reaching each other")
    # The nodes hold their ENI's address, and their IPv6 default route goes to the router.
    eth0 = fabric.nodes[0].ns.nl.link_index("eth0")
    held = {x.ip for x in fabric.nodes[0].ns.nl.addrs(eth0, socket.AF_INET6)}
    assert fabric.topo.instances[0].primary_ipv6 in held
    default = [r for r in fabric.nodes[0].ns.nl.routes(family=socket.AF_INET6)
               if r.dst == "default"]
    assert [(r.gateway, r.oif) for r in default] == [(routes.ROUTER_LL, eth0)]


def test_a_prefix_moved_to_another_node_no_longer_reaches_the_old_one(dual_fabric, fab_cloud):
    """EC2 routes each /80 to the ENI that holds it, and drops what a pod sends from an
    address its ENI does not hold (the source/dest check)."""
    fabric = dual_fabric(nodes=3)
    nets = [delegate(fab_cloud, fabric, n) for n in range(3)]
    a = fabric.add_pod(0, str(nets[0][5]))
    b = fabric.add_pod(1, str(nets[1][5]))
    c = fabric.add_pod(2, str(nets[2][5]))
    wait_until(lambda: reach6(a, b) and reach6(b, a), 3.0, what="a and b reaching each other")
    ec2 = fab_cloud.client()
    ec2.unassign_ipv6_addresses(NetworkInterfaceId=fabric.topo.instances[0].primary_eni_id,
                                Ipv6Prefixes=[str(nets[0])])
    ec2.assign_ipv6_addresses(NetworkInterfaceId=fabric.topo.instances[2].primary_eni_id,
                              Ipv6Prefixes=[str(nets[0])])
    assert fabric.wait_synced(fab_cloud.gate.owners().version)
    assert routed_to(fabric, nets[0]) == 2
    assert not reach6(b, a)  # routed to node 2 now, where no pod holds it
    assert not reach6(a, b)  # a's source is no longer its ENI's: dropped
    assert reach6(c, b) and reach6(b, c)


def test_nodes_reach_the_imds_ipv6_endpoint(dual_fabric, fab_cloud):
    from fault_imds.server import ImdsServer

    imds = ImdsServer(ec2_endpoint=fab_cloud.endpoint).start()
    try:
        fabric = dual_fabric(nodes=2, imds=imds)
        assert fabric.imds_endpoint6 == "http://[fd00:ec2::254]"
        for n, inst in enumerate(fabric.topo.instances):
            # The IMDS learns of the new instances (and their IPv6 addresses) from EC2 a
            # moment after they are made: a 404 until then.
            got = wait_until(lambda n=n: imds_get6(fabric, n, "instance-id"), 15,
                             what=f"node {n}'s IMDS answer over IPv6")
            assert got == inst.instance_id  # known by the address it asks from
    finally:
        imds.stop()


def imds_get6(fabric, node: int, leaf: str) -> str | None:
    """The IMDS's answer to `leaf`, asked from the node's namespace over IPv6 (None: not
    200)."""
    with netns.entered(fabric.nodes[node].ns.fd):
        conn = http.client.HTTPConnection("fd00:ec2::254", 80, timeout=5)
        conn.connect()  # the socket is made in the node's namespace
    try:
        conn.request("GET", f"/latest/meta-data/{leaf}")
        resp = conn.getresponse()
        body = resp.read().decode()
    finally:
        conn.close()
    return body if resp.status == 200 else None


def test_an_ipv6_only_interface_becomes_a_link_with_its_ipv6_address_alone(dual_fabric,
                                                                             fab_cloud):
    fabric = dual_fabric(nodes=1)
    ec2 = fab_cloud.client()
    topo = fabric.topo
    block = list(ipaddress.IPv6Network(topo.vpc_ipv6_cidr).subnets(new_prefix=64))[7]
    subnet = ec2.create_subnet(VpcId=topo.vpc_id, Ipv6Native=True, Ipv6CidrBlock=str(block),
                               AvailabilityZone=topo.az)["Subnet"]["SubnetId"]
    eni = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]
    ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                 InstanceId=topo.instances[0].instance_id, DeviceIndex=1)
    assert fabric.wait_synced(fab_cloud.gate.owners().version)
    assert not fabric.sync_errors
    nl = fabric.nodes[0].ns.nl
    eth1 = nl.link_index("eth1")
    assert eth1 is not None and nl.addrs(eth1) == []  # no IPv4 on it
    held = {a.ip for a in nl.addrs(eth1, socket.AF_INET6)}
    assert eni["Ipv6Addresses"][0]["Ipv6Address"] in held
