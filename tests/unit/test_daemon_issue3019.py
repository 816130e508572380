"""Upstream issue 3019 end to end: real daemon processes, the EC2 gate, and the fault IMDS
holding an ENI's entries stale. With IMDS frozen at [P, ip1..ip9], the daemon releases ip1
(another node picks it up, as happens in a busy subnet) and gets a new IP for a pod; the
lengths agree again (1 + 9 == 10) while the contents differ.
vpc-cni-1.18.3 then drops the in-use IP; vpc-cni-1.18.4 and hardened keep it."""

from __future__ import annotations

import pytest

from cnikit.cluster import ec2_ips_of
from cnikit.daemon import profiles
from cnikit.daemon.imds_http import HttpImds
from cnikit.daemon.process import DaemonProcess
from cnikit.daemon.server import request
from tests.waiting import wait_for

PROFILES = profiles.names()  # the registry: a new profile is tested here too


@pytest.fixture(scope="module")
def world():
    from cnikit.cloud import Cloud
    from fault_imds.client import FaultClient
    from fault_imds.server import ImdsServer

    cloud = Cloud.start(ec2="moto")
    topo = cloud.bootstrap(nodes=len(PROFILES) + 1, instance_type="m5.large")
    imds = ImdsServer(ec2_endpoint=cloud.endpoint).start()
    yield cloud, topo, imds, FaultClient(imds.control_url)
    imds.stop()
    cloud.stop()




def call(d, cmd, cid):
    return request(d.socket_path, {"cmd": cmd, "network": "aws-cni", "containerID": cid, "ifName": "eth0"})


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_issue_3019_end_to_end(world, tmp_path, profile):
    cloud, topo, imds, faults = world
    inst = topo.instances[PROFILES.index(profile)]
    d = DaemonProcess(tmp_path / "state", env={
        "AWS_ENDPOINT_URL_EC2": cloud.endpoint, "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
        "CNIKIT_INSTANCE_ID": inst.instance_id, "CNIKIT_PROFILE": profile,
        "CNIKIT_TIME_SCALE": "0.05", "WARM_IP_TARGET": "1", "MAX_ENI": "1",
        "CNIKIT_METRICS_ADDR": "off", "CNIKIT_INTROSPECTION_ADDR": "off",
    }).start()
    try:
        ips = {f"pod{i}": call(d, "add", f"pod{i}")["ip"] for i in range(1, 9)}
        wait_for(lambda: request(d.socket_path, {"cmd": "status"})["stats"]["total"] == 9, 10,
                 "a full ENI (9 secondary IPs)")
        eni = ec2_ips_of(cloud.gate.owners(), inst.instance_id)[ips["pod1"]][0]
        mac = cloud.gate.owners().enis[eni].mac
        view = HttpImds(imds.url, inst.instance_id)
        # Freeze IMDS only once it shows the full ENI: [P, ip1..ip9].
        wait_for(lambda: [len(v.ips) for v in view.enis() if v.mac == mac] == [10], 10,
                 "IMDS to show the full ENI")
        with faults.stale(mac=mac):
            call(d, "del", "pod1")
            # ip1 cools down, then the pool releases it to EC2 (WARM_IP_TARGET=1 is exceeded).
            wait_for(lambda: ips["pod1"] not in cloud.gate.owners().enis[eni].ips, 15,
                     "ip1 released to EC2")
            other = topo.instances[-1].primary_eni_id
            cloud.client().assign_private_ip_addresses(NetworkInterfaceId=other,
                                                       PrivateIpAddresses=[ips["pod1"]])
            ips["pod9"] = call(d, "add", "pod9")["ip"]
            new = call(d, "add", "pod10")
            assert new["ok"], new
            ips["pod10"] = new["ip"]
            assert ips["pod10"] in cloud.gate.owners().enis[eni].ips
            assert ips["pod10"] != ips["pod1"]
            start = request(d.socket_path, {"cmd": "status"})["reconciles"]
            wait_for(lambda: request(d.socket_path, {"cmd": "status"})["reconciles"] >= start + 2, 15,
                     "two reconciles with IMDS stale")
            held = call(d, "check", "pod10")
            events = request(d.socket_path, {"cmd": "status"})["events"]
        if profile == "vpc-cni-1.18.3":
            assert not held["ok"], "1.18.3 should have dropped pod10's in-use IP"
        else:
            assert held["ok"] and held["ip"] == ips["pod10"], (ips, events, d.tail(20))
            for name in ("pod2", "pod9"):
                assert call(d, "check", name)["ip"] == ips[name]
    finally:
        d.stop()
