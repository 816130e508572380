"""slow-attachment: attach and detach that take time, as real EC2's (upstream #732, #401)."""

from __future__ import annotations

import json

import urllib3

from tests.unit.test_gate_rules import new_eni, refused
from tests.waiting import wait_for


def _status(ec2, eni_id: str) -> tuple[str, str | None]:
    ni = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0]
    return ni["Status"], (ni.get("Attachment") or {}).get("Status")


def test_detach_takes_time_and_delete_is_refused_meanwhile(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    inst = topo.instances[0]
    eni = new_eni(ec2, topo)
    cloud.gate.faults.add("slow-attachment", attach_s=1.0, detach_s=2.0)
    att = ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=inst.instance_id,
                                       DeviceIndex=1)["AttachmentId"]
    assert _status(ec2, eni) == ("in-use", "attaching")
    assert eni not in {e.eni_id for e in cloud.gate.owners().enis.values()
                       if e.instance_id is None}
    wait_for(lambda: _status(ec2, eni) == ("in-use", "attached"), 15, "the attach completes")
    ec2.detach_network_interface(AttachmentId=att, Force=True)
    assert _status(ec2, eni) == ("in-use", "detaching")
    ec2.detach_network_interface(AttachmentId=att, Force=True)  # again: answered as done
    # What real EC2 answers (upstream #1399's log): the ENI is still in use.
    refused(lambda: ec2.delete_network_interface(NetworkInterfaceId=eni), "InvalidParameterValue")
    wait_for(lambda: _status(ec2, eni) == ("available", None), 15, "the detach completes")
    ec2.delete_network_interface(NetworkInterfaceId=eni)
    cloud.gate.faults.clear()


def test_pending_transition_survives_a_resync_and_shutdown_cancels_it(gate_new_vpc):
    from cnikit.cloud import Cloud

    cloud = Cloud.start(ec2="moto", seed=7)
    try:
        topo = gate_new_vpc(cloud)
        ec2 = cloud.client()
        eni = new_eni(ec2, topo)
        cloud.gate.faults.add("slow-attachment", attach_s=0, detach_s=60.0)
        att = ec2.attach_network_interface(NetworkInterfaceId=eni,
                                           InstanceId=topo.instances[0].instance_id,
                                           DeviceIndex=1)["AttachmentId"]
        ec2.detach_network_interface(AttachmentId=att)
        cloud.gate.resync()
        assert _status(ec2, eni) == ("in-use", "detaching")
        assert cloud.gate.transitions.pending() == 1
    finally:
        cloud.stop()
    assert cloud.gate.transitions.pending() == 0


def test_bad_slow_attachment_spec_is_a_400(gate_cloud):
    http = urllib3.PoolManager()
    base = gate_cloud.endpoint + "/_cnikit/faults"
    for bad in ({"kind": "slow-attachment", "detach_s": -1},
                {"kind": "slow-attachment", "attach_s": "slow"},
                {"kind": "slow-attachment", "detach_s": 1e6},
                {"kind": "slow-attachment", "settle": 3}):
        r = http.request("POST", base, body=json.dumps(bad))
        assert r.status == 400, bad
        assert "\n" not in json.loads(r.data)["error"]
    assert json.loads(http.request("GET", base).data)["faults"] == []
