"""Take on release (cnikit.cluster.take_on_release): what a release from an ENI frees goes to
another interface once EC2 freed it and before the answer leaves, so the caller cannot
assign it again first. Real parts: moto behind the gate, boto3 clients over HTTP."""

from __future__ import annotations

import time

import boto3
import botocore.config
import pytest

from cnikit.check.history import History
from cnikit.cluster.nemesis import Nemesis
from tests.waiting import wait_for


@pytest.fixture
def taking(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    ips = [a["PrivateIpAddress"] for a in ec2.assign_private_ip_addresses(
        NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=3)["AssignedPrivateIpAddresses"]]
    spare = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"][
        "NetworkInterfaceId"]
    h = History()
    return Nemesis(h, cloud=cloud), h, cloud, eni, spare, ips


def once(cloud):
    """A client that tries a call once (the kit's retries a 500)."""
    return boto3.client("ec2", endpoint_url=cloud.endpoint, region_name=cloud.region,
                        aws_access_key_id="test", aws_secret_access_key="test",
                        config=botocore.config.Config(retries={"total_max_attempts": 1}))


def test_a_release_is_taken_before_its_caller_can_assign_the_address_again(taking):
    n, h, cloud, eni, spare, ips = taking
    ec2 = cloud.client()
    with n.take_on_release(eni, spare) as taker:
        assert taker.first_at is None
        called = time.time()
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=ips[:2])
        answered = time.time()
        # When EC2 freed them, not when someone saw it: the start of a window timed from it.
        assert called <= taker.first_at <= answered
        # The caller's very next call, right after the answer: the addresses are gone.
        with pytest.raises(Exception, match="in use|InvalidParameterValue|already"):
            ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                            PrivateIpAddresses=[ips[0]])
    assert sorted(taker.taken) == sorted(ips[:2])
    owners = cloud.gate.owners().ips
    assert {owners[ip].eni_id for ip in ips[:2]} == {spare}
    assert owners[ips[2]].eni_id == eni
    takes = [e for e in h.entries() if e["f"] == "ec2-assign-elsewhere"]
    assert [t["value"]["target"] for t in takes] == [{"eni": spare, "ips": ips[:2]}]


def test_a_release_whose_answer_is_lost_is_taken_all_the_same(taking):
    n, h, cloud, eni, spare, ips = taking
    cloud.gate.faults.add("lost-response", target={"action": "UnassignPrivateIpAddresses"})
    with n.take_on_release(eni, spare) as taker:
        with pytest.raises(Exception, match="InternalError"):
            once(cloud).unassign_private_ip_addresses(NetworkInterfaceId=eni,
                                                      PrivateIpAddresses=[ips[0]])
    assert taker.taken == [ips[0]]
    assert cloud.gate.owners().ips[ips[0]].eni_id == spare


def test_a_refused_release_another_eni_or_a_closed_take_takes_nothing(taking):
    n, h, cloud, eni, spare, ips = taking
    ec2 = cloud.client()
    taker = n.take_on_release(eni, spare)
    try:
        with pytest.raises(Exception, match="InvalidParameterValue"):  # not on the ENI
            ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni,
                                              PrivateIpAddresses=["10.255.0.9"])
        other = [a["PrivateIpAddress"] for a in ec2.assign_private_ip_addresses(
            NetworkInterfaceId=spare, SecondaryPrivateIpAddressCount=1)[
            "AssignedPrivateIpAddresses"]]
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=spare, PrivateIpAddresses=other)
        assert taker.taken == [] and taker.first_at is None
    finally:
        assert taker.close() == []
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ips[0]])
    assert cloud.gate.owners().ips.get(ips[0]) is None and taker.taken == []
    assert not cloud.gate.after  # no hook left


def test_close_waits_for_the_take_of_a_release_ec2_already_shows(taking):
    """EC2 shows a release before its after-call hooks run: a scenario that disarmed as soon
    as it saw the addresses gone raced the take (a loaded machine lost it: nothing taken)."""
    import threading

    n, h, cloud, eni, spare, ips = taking
    go = threading.Event()
    real = n.take_ips

    def slow_take(eni_id, addresses):
        go.wait(10)
        real(eni_id, addresses)

    n.take_ips = slow_take
    taker = n.take_on_release(eni, spare)
    call = threading.Thread(target=lambda: cloud.client().unassign_private_ip_addresses(
        NetworkInterfaceId=eni, PrivateIpAddresses=[ips[0]]))
    call.start()
    closed: dict = {}
    closer = threading.Thread(target=lambda: closed.update(taken=taker.close(expect=[ips[0]])))
    try:
        # EC2 shows the release, as the scenario's release() sees it, its take queued.
        wait_for(lambda: cloud.gate.owners().ips.get(ips[0]) is None, what="the release")
        closer.start()
        closer.join(0.3)
        assert closer.is_alive()  # the take is under way: close waits for it
    finally:
        go.set()
    closer.join(10)
    call.join(10)
    assert closed["taken"] == [ips[0]]
    assert cloud.gate.owners().ips[ips[0]].eni_id == spare
