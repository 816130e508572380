"""The hardened daemon under every IMDS fault kind and EC2 throttling, as real processes on
loopback: while faults run and pods churn, no pod loses its IP, no IP is held twice, and
every held IP is EC2's on this instance. The ENI-missing fault (upstream issue 1967) is also
run against vpc-cni-1.18.4 to show the difference."""

from __future__ import annotations

import time

import pytest

from cnikit.cluster import ec2_ips_of
from cnikit.daemon.process import DaemonProcess
from cnikit.daemon.server import request

SCALE = "0.02"  # reconcile every 1.2 s


@pytest.fixture(scope="module")
def world():
    from cnikit.cloud import Cloud
    from fault_imds.client import FaultClient
    from fault_imds.server import ImdsServer

    cloud = Cloud.start(ec2="moto")
    topo = cloud.bootstrap(nodes=2, instance_type="m5.large")
    imds = ImdsServer(ec2_endpoint=cloud.endpoint, seed=7).start()
    yield cloud, topo, imds, FaultClient(imds.control_url)
    imds.stop()
    cloud.stop()


def start(world, tmp_path, profile, node):
    cloud, topo, imds, _ = world
    return DaemonProcess(tmp_path / f"state-{profile}", env={
        "AWS_ENDPOINT_URL_EC2": cloud.endpoint, "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
        "CNIKIT_INSTANCE_ID": topo.instances[node].instance_id, "CNIKIT_PROFILE": profile,
        "CNIKIT_TIME_SCALE": SCALE, "WARM_IP_TARGET": "2",
        "CNIKIT_METRICS_ADDR": "off", "CNIKIT_INTROSPECTION_ADDR": "off",
    }).start()


def call(d, cmd, cid):
    return request(d.socket_path, {"cmd": cmd, "network": "aws-cni", "containerID": cid, "ifName": "eth0"})


def status(d):
    return request(d.socket_path, {"cmd": "status"})


def wait_reconciles(d, n, timeout=20):
    start = status(d)["reconciles"]
    end = time.monotonic() + timeout
    while status(d)["reconciles"] < start + n:
        assert time.monotonic() < end, "reconcile stalled"
        time.sleep(0.05)


def verify(cloud, instance_id, d, pods):
    for cid, ip in pods.items():
        r = call(d, "check", cid)
        assert r["ok"] and r["ip"] == ip, f"{cid} lost {ip}: {r}"
    assert len(set(pods.values())) == len(pods)
    mine = ec2_ips_of(cloud.gate.owners(), instance_id)
    for ip in pods.values():
        assert ip in mine and not mine[ip][2], (ip, mine.get(ip))


FAULTS = [  # kind, extra target, attributes
    ("stale", {}, {}),
    ("missing", {"path": "network/interfaces/macs/*/local-ipv4s"}, {}),
    ("lag", {}, {"seconds": 5}),
    ("error", {}, {"status": 500, "probability": 0.5}),
    ("latency", {}, {"ms": 100, "jitter_ms": 50}),
    ("token", {}, {"mode": "expire"}),
    ("drop", {}, {"probability": 0.5}),
]


@pytest.mark.slow
def test_hardened_holds_under_every_imds_fault_and_ec2_throttling(world, tmp_path):
    cloud, topo, imds, faults = world
    iid = topo.instances[0].instance_id
    d = start(world, tmp_path, "hardened", 0)
    try:
        pods = {f"p{i}": call(d, "add", f"p{i}")["ip"] for i in range(12)}
        seq = 12
        for kind, target, attrs in FAULTS:
            t0 = time.monotonic()
            fid = faults.add(kind, target={"instance_id": iid, **target}, **attrs)
            try:
                for _ in range(3):  # churn while the fault runs
                    victim = sorted(pods)[0]
                    assert call(d, "del", victim)["ok"]
                    del pods[victim]
                    seq += 1
                    r = call(d, "add", f"p{seq}")
                    assert r["ok"], (kind, r)
                    pods[f"p{seq}"] = r["ip"]
                wait_reconciles(d, 2)
                verify(cloud, iid, d, pods)
            finally:
                fid.remove()
            print(f"{kind}: {time.monotonic() - t0:.1f}s")
        throttle = cloud.gate.faults.add("throttle", target={"action": "AssignPrivateIpAddresses"},
                                          probability=0.7)
        try:
            for _ in range(6):
                seq += 1
                r = call(d, "add", f"p{seq}")
                if r["ok"]:
                    pods[f"p{seq}"] = r["ip"]
                else:
                    assert r["code"] == 11, r
            wait_reconciles(d, 2)
            verify(cloud, iid, d, pods)
        finally:
            cloud.gate.faults.remove(throttle)
        assert status(d)["stats"]["assigned"] == len(pods)
    finally:
        d.stop()


@pytest.mark.parametrize("profile,keeps", [("vpc-cni-1.18.4", False), ("hardened", True)])
def test_eni_missing_from_imds_issue_1967(world, tmp_path, profile, keeps):
    cloud, topo, imds, faults = world
    iid = topo.instances[1].instance_id
    d = start(world, tmp_path, profile, 1)
    try:
        pods = {f"q{i}": call(d, "add", f"q{i}")["ip"] for i in range(12)}
        mine = ec2_ips_of(cloud.gate.owners(), iid)
        secondary = {cid: ip for cid, ip in pods.items() if mine[ip][1] == 1}
        assert secondary
        eni = mine[next(iter(secondary.values()))][0]
        with faults.missing(eni_id=eni):
            wait_reconciles(d, 2)
            lost = [cid for cid in secondary if not call(d, "check", cid)["ok"]]
        if keeps:
            assert not lost
            verify(cloud, iid, d, pods)
        else:
            assert sorted(lost) == sorted(secondary), "1.18.4 force-removes the ENI's pods"
        for cid in pods:
            call(d, "del", cid)
    finally:
        d.stop()
