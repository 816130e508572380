"""Which node an EC2 call acts on (cnikit.cloud.acted_on), as the gate tells its after-call
hooks and its throttle log. The calls come from loopback, an address no node holds, as an
operator's calls from the VPC namespace do: the caller is no node, the node acted on is."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from cnikit.cloud.after_call import AnsweredCall


@pytest.fixture
def seen(gate_cloud, gate_new_vpc):
    """(cloud, topology, the calls the gate answered from now on)."""
    topo = gate_new_vpc(gate_cloud, nodes=2)
    calls: list[AnsweredCall] = []
    hid = gate_cloud.gate.after.add(calls.append)
    yield gate_cloud, topo, calls
    gate_cloud.gate.after.remove(hid)


def answered(calls: list[AnsweredCall], action: str) -> AnsweredCall:
    [call] = [c for c in calls if c.action == action]
    return call


def test_a_call_about_node_1s_eni_from_no_node_is_node_1s(seen):
    cloud, topo, calls = seen
    node1 = topo.instances[1]
    ec2 = cloud.client()
    ec2.assign_private_ip_addresses(NetworkInterfaceId=node1.primary_eni_id,
                                    SecondaryPrivateIpAddressCount=1)
    call = answered(calls, "AssignPrivateIpAddresses")
    assert call.instance_id is None and call.source == "127.0.0.1"  # the caller: no node
    assert call.node_instance == node1.instance_id  # the node acted on
    assert call.source_port  # which connection: a component is told by the one it holds


def test_attach_detach_and_delete_name_the_node_the_eni_was_on(seen):
    cloud, topo, calls = seen
    node1 = topo.instances[1]
    ec2 = cloud.client()
    eni = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"][
        "NetworkInterfaceId"]
    # A new ENI's subnet names no node: the caller would decide, and here it is none.
    assert answered(calls, "CreateNetworkInterface").node_instance is None
    att = ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=node1.instance_id,
                                       DeviceIndex=1)["AttachmentId"]
    assert answered(calls, "AttachNetworkInterface").node_instance == node1.instance_id
    # Detach names only the attachment; read before the call, it is still node 1's.
    ec2.detach_network_interface(AttachmentId=att)
    assert answered(calls, "DetachNetworkInterface").node_instance == node1.instance_id
    ec2.delete_network_interface(NetworkInterfaceId=eni)  # detached: on no node any more
    assert answered(calls, "DeleteNetworkInterface").node_instance is None


def test_a_throttled_call_is_logged_with_the_node_it_acted_on(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=2)
    node1 = topo.instances[1]
    before = len(gate_cloud.gate.audit.throttled())
    gate_cloud.gate.faults.add("throttle", target={"action": "AssignPrivateIpAddresses"})
    try:
        with pytest.raises(ClientError, match="RequestLimitExceeded"):
            gate_cloud.client().assign_private_ip_addresses(
                NetworkInterfaceId=node1.primary_eni_id, SecondaryPrivateIpAddressCount=1)
    finally:
        gate_cloud.gate.faults.clear()
    got = gate_cloud.gate.audit.throttled()[before:]
    assert got and {(t.source, t.named, t.acted_on) for t in got} == {
        ("127.0.0.1", None, node1.instance_id)}
