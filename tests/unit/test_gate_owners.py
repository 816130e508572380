"""Who owns each IP, according to EC2: owners(), wait_change(), the HTTP long-poll, extra listeners."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time

import urllib3

from cnikit.cloud import OwnershipSnapshot


def test_snapshot_follows_every_change(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    gate = gate_cloud.gate
    eni = topo.instances[0].primary_eni_id
    inst = topo.instances[0]
    snap = gate.owners()
    assert snap.ips[inst.primary_ip].eni_id == eni and snap.ips[inst.primary_ip].primary
    info = snap.enis[eni]
    assert (info.instance_id, info.device_index, info.mac, info.primary_ip, info.subnet_id) == (
        inst.instance_id, 0, inst.mac, inst.primary_ip, topo.subnet_id)
    ec2 = gate_cloud.client()
    ip = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)[
        "AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
    after = gate.owners()
    assert after.version > snap.version and ip not in snap.ips
    assert after.ips[ip].eni_id == eni and not after.ips[ip].primary
    assert after.enis[eni].ips == [inst.primary_ip, ip]
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ip])
    assert ip not in gate.owners().ips


def test_wait_change_wakes_on_change_and_times_out(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    gate = gate_cloud.gate
    v = gate.owners().version
    started = time.monotonic()
    assert gate.wait_change(v, 0.2).version == v
    assert time.monotonic() - started >= 0.2
    ec2 = gate_cloud.client()
    t = threading.Thread(target=ec2.assign_private_ip_addresses, kwargs={
        "NetworkInterfaceId": topo.instances[0].primary_eni_id, "SecondaryPrivateIpAddressCount": 1})
    t.start()
    snap = gate.wait_change(v, 10)
    t.join(10)
    assert snap.version > v


def test_http_long_poll(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    http = urllib3.PoolManager()
    url = gate_cloud.endpoint + "/_cnikit/owners"
    snap = OwnershipSnapshot.from_json(json.loads(http.request("GET", url).data))
    assert snap == gate_cloud.gate.owners()
    started = time.monotonic()
    same = json.loads(http.request("GET", f"{url}?since={snap.version}&wait=0.3").data)
    assert same["version"] == snap.version and time.monotonic() - started >= 0.3
    result = {}

    def poll():
        result["snap"] = json.loads(http.request("GET", f"{url}?since={snap.version}&wait=20").data)

    t = threading.Thread(target=poll)
    t.start()
    gate_cloud.client().assign_private_ip_addresses(
        NetworkInterfaceId=topo.instances[0].primary_eni_id, SecondaryPrivateIpAddressCount=1)
    t.join(20)
    assert result["snap"]["version"] > snap.version
    assert http.request("GET", f"{url}?since=x").status == 400


def test_add_listener_serves_a_prebound_socket(gate_cloud):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    gate_cloud.gate.add_listener(sock)
    ec2 = gate_cloud.client(endpoint=f"http://127.0.0.1:{port}")
    assert "NetworkInterfaces" in ec2.describe_network_interfaces()
    r = urllib3.PoolManager().request("GET", f"http://127.0.0.1:{port}/_cnikit/owners")
    assert json.loads(r.data)["version"] == gate_cloud.gate.owners().version


def test_resync_picks_up_changes_made_behind_the_gate(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    eni = topo.instances[0].primary_eni_id
    behind = gate_cloud.client(endpoint=gate_cloud.upstream_url)
    ip = str(ipaddress.ip_network(topo.subnet_cidr)[77])
    behind.assign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ip])
    assert ip not in gate_cloud.gate.owners().ips
    gate_cloud.gate.resync()
    assert gate_cloud.gate.owners().ips[ip].eni_id == eni


def test_the_feed_counts_writes_that_may_change_instances_subnets_or_vpcs(gate_cloud,
                                                                          gate_new_vpc):
    # The fault IMDS refreshes instances, subnets and VPCs when this count moves, not every
    # few seconds: a write to an ENI or its addresses must not move it, any other write must.
    topo = gate_new_vpc(gate_cloud, nodes=1)
    ec2 = gate_cloud.client()
    http = urllib3.PoolManager()
    url = gate_cloud.endpoint + "/_cnikit/owners"

    def world() -> int:
        return json.loads(http.request("GET", url).data)["world"]

    before = world()
    ec2.assign_private_ip_addresses(NetworkInterfaceId=topo.instances[0].primary_eni_id,
                                    SecondaryPrivateIpAddressCount=1)
    ec2.describe_instances()
    assert world() == before
    ec2.create_tags(Resources=[topo.subnet_id], Tags=[{"Key": "kubernetes.io/role/cni",
                                                       "Value": "1"}])
    assert world() == before + 1
    ec2.terminate_instances(InstanceIds=[topo.instances[0].instance_id])
    assert world() == before + 2
