"""The VPC fabric against a real EC2 gate: ENI links, routes following ownership, the
source/dest check, and the IMDS and EC2 endpoints inside the VPC."""

from __future__ import annotations

import json
import socket
import statistics
import time
import urllib.error
import urllib.request

import pytest

from cnikit.fabric import ec2ops, netns
from tests.integration.conftest import needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]


def udp_ok(src_pod, dst_pod, timeout=0.5) -> bool:
    with netns.entered(dst_pod.ns.fd):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with netns.entered(src_pod.ns.fd):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("0.0.0.0", 9998))
        rx.settimeout(timeout)
        tx.sendto(b"x", (dst_pod.ip, 9998))
        try:
            return rx.recvfrom(8)[1][0] == src_pod.ip
        except TimeoutError:
            return False


def test_eni_links_carry_ec2s_addresses_and_macs(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=3)
    assert [n.name for n in fabric.nodes] == [f"ck-{fabric.rid}-n{i}" for i in range(3)]
    vpc_routes = {r.dst: r for r in fabric.vpc.nl.routes()}
    for node, inst in zip(fabric.nodes, fabric.topo.instances, strict=True):
        eth0 = node.ns.nl.link("eth0")
        assert eth0.mac == inst.mac.lower() and eth0.up
        assert [(a.ip, a.prefixlen) for a in node.ns.nl.addrs(eth0.index)] == [(inst.primary_ip, 24)]
        default = next(r for r in node.ns.nl.routes() if r.dst == "default")
        assert default.gateway == fabric.router and default.oif == eth0.index
        assert fabric.router == fabric.topo.subnet_cidr.replace(".0/24", ".1")
        assert vpc_routes[f"{inst.primary_ip}/32"].oif == node.links[0].vpc_index
    # Every link in the vpc namespace carries the run id.
    assert all(link.name.startswith(fabric.rid) for link in fabric.vpc.nl.links()
               if link.name != "lo")


def test_routes_follow_ec2_ownership_within_200ms(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=2)
    ec2 = fab_cloud.client()
    eni0, eni1 = (i.primary_eni_id for i in fabric.topo.instances)
    prim0, prim1 = (i.primary_ip for i in fabric.topo.instances)
    lags = []

    def route_of(ip):
        r = next((r for r in fabric.vpc.nl.routes() if r.dst == f"{ip}/32"), None)
        return r.gateway if r else None

    for n in range(4):
        ip = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni0, SecondaryPrivateIpAddressCount=1
                                             )["AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
        t = time.monotonic()
        wait_until(lambda ip=ip: route_of(ip) == prim0, 1.0, 0.002, f"route to {ip}")
        lags.append(time.monotonic() - t)
        # moved to the other node (AllowReassignment), then released
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni1, PrivateIpAddresses=[ip],
                                        AllowReassignment=True)
        t = time.monotonic()
        wait_until(lambda ip=ip: route_of(ip) == prim1, 1.0, 0.002, f"{ip} moved")
        lags.append(time.monotonic() - t)
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni1, PrivateIpAddresses=[ip])
        t = time.monotonic()
        wait_until(lambda ip=ip: route_of(ip) is None, 1.0, 0.002, f"{ip} gone")
        lags.append(time.monotonic() - t)
        print(f"round {n}: lags {[round(x * 1000, 1) for x in lags[-3:]]} ms")
    assert statistics.median(lags) < 0.2, lags
    assert not fabric.sync_errors


def test_secondary_eni_and_prefix_appear_and_go(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=1)
    ec2 = fab_cloud.client()
    node = fabric.nodes[0]
    eni_id = ec2ops.attach_eni(fab_cloud, fabric, 0, 1)
    eni = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0]
    eth1 = wait_until(lambda: node.ns.nl.link("eth1"), 2.0, what="eth1 in the node")
    assert eth1.mac == eni["MacAddress"].lower()
    # The link shows as soon as it exists; its address follows within the same sync.
    wait_until(lambda: [a.ip for a in node.ns.nl.addrs(eth1.index)] == [eni["PrivateIpAddress"]],
               1.0, what="eth1's address")

    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_id, Ipv4PrefixCount=1)
    prefix = wait_until(lambda: fab_cloud.gate.owners().enis[eni_id].prefixes, 2.0)[0]
    wait_until(lambda: any(r.dst == prefix and r.gateway == eni["PrivateIpAddress"]
                           for r in fabric.vpc.nl.routes()), 1.0, what=f"route to {prefix}")

    attachment = eni["Attachment"]["AttachmentId"]
    ec2.detach_network_interface(AttachmentId=attachment)
    wait_until(lambda: node.ns.nl.link("eth1") is None, 2.0, what="eth1 gone")
    assert not any(r.dst == prefix for r in fabric.vpc.nl.routes())


def test_source_dest_check_drops_a_pod_whose_ip_ec2_does_not_give_its_node(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=2)
    ec2 = fab_cloud.client()
    [(ip_a, _)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 1)
    [(ip_b, _)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 1, 1)
    a, b = fabric.add_pod(0, ip_a), fabric.add_pod(1, ip_b)
    assert udp_ok(a, b) and udp_ok(b, a)
    # A pod on node 1 with an IP EC2 gave node 0's ENI: its packets leave through node 1's
    # ENI, whose source check drops them; answers to it are routed to node 0.
    [(ip_c, _)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 1)
    c = fabric.add_pod(1, ip_c)
    assert not udp_ok(c, a) and not udp_ok(a, c)
    # Giving the IP to node 1 makes it whole.
    ec2.assign_private_ip_addresses(NetworkInterfaceId=fabric.topo.instances[1].primary_eni_id,
                                    PrivateIpAddresses=[ip_c], AllowReassignment=True)
    wait_until(lambda: udp_ok(c, a, 0.1) and udp_ok(a, c, 0.1), 2.0, what="c reachable")


def test_imds_and_ec2_gate_answer_inside_the_vpc(make_fabric, fab_cloud):
    from fault_imds.server import ImdsServer

    imds = ImdsServer(ec2_endpoint=fab_cloud.endpoint).start()
    try:
        fabric = make_fabric(nodes=2, imds=imds)
        def get(node, url):
            with netns.entered(node.ns.fd):  # the connection is made from the node
                try:
                    return urllib.request.urlopen(url, timeout=5).read().decode()
                except urllib.error.HTTPError:
                    return None  # the IMDS follows EC2 a moment late: not there yet

        for node in fabric.nodes:
            iid = wait_until(lambda n=node: get(n, f"{fabric.imds_endpoint}/latest/meta-data/"
                                                   "instance-id"), 5, 0.05, "IMDS answer")
            assert iid == node.instance_id
            owners = json.loads(get(node, f"{fabric.ec2_endpoint}/_cnikit/owners"))
            assert owners["ips"][node.primary_ip]["instance_id"] == node.instance_id
    finally:
        imds.stop()
