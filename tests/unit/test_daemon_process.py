"""`cnikit daemon` as a real process against the real EC2 (moto + gate) and the fault IMDS,
on loopback: socket API, metrics, introspection, SIGKILL and restart."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request

import pytest

from cnikit.cluster import ec2_ips_of
from cnikit.daemon.process import DaemonProcess
from cnikit.daemon.server import request
from cnikit.errors import DaemonNotReady
from tests.waiting import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world():
    from cnikit.cloud import Cloud
    from fault_imds.server import ImdsServer

    cloud = Cloud.start(ec2="moto")
    topo = cloud.bootstrap(nodes=1, instance_type="m5.large")
    inst = topo.instances[0]
    imds = ImdsServer(ec2_endpoint=cloud.endpoint, instance_id=inst.instance_id).start()
    yield cloud, imds, inst
    imds.stop()
    cloud.stop()


@pytest.fixture(scope="module")
def daemon(world, tmp_path_factory):
    cloud, imds, inst = world
    state = tmp_path_factory.mktemp("node0")
    # A port found free may be taken before the daemon binds it (other tests' connections
    # come and go): then the daemon exits "Address already in use", and gets two new ones.
    for attempt in range(5):
        mport, iport = free_port(), free_port()
        try:
            p = DaemonProcess(state, env={
                "AWS_ENDPOINT_URL_EC2": cloud.endpoint,
                "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
                "AWS_REGION": cloud.region,
                "CNIKIT_INSTANCE_ID": inst.instance_id,
                "CNIKIT_PROFILE": "hardened",
                "CNIKIT_TIME_SCALE": "0.05",
                "CNIKIT_METRICS_ADDR": f"127.0.0.1:{mport}",
                "CNIKIT_INTROSPECTION_ADDR": f"127.0.0.1:{iport}",
            }).start()
            break
        except DaemonNotReady as e:
            if "Address already in use" not in str(e) or attempt == 4:
                raise
    p.ports = (mport, iport)
    yield p
    p.stop()


def add(p, n):
    return request(p.socket_path, {"cmd": "add", "network": "aws-cni", "containerID": f"c{n}",
                                   "ifName": "eth0", "metadata": {"k8sPodName": f"p{n}"}})


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()




def test_add_gives_an_ip_ec2_has_on_this_instance(world, daemon):
    cloud, _, inst = world
    ips = [add(daemon, n) for n in range(12)]
    assert all(r["ok"] for r in ips), ips
    assert len({r["ip"] for r in ips}) == 12
    mine = ec2_ips_of(cloud.gate.owners(), inst.instance_id)
    for r in ips:
        assert mine[r["ip"]] == (r["eniId"], r["deviceNumber"], False)
    assert r["router"] and r["subnetCidr"]
    assert add(daemon, 0)["ip"] == ips[0]["ip"], "ADD of the same sandbox is idempotent"


def test_del_twice_and_check(daemon):
    r = add(daemon, 100)
    key = {"network": "aws-cni", "containerID": "c100", "ifName": "eth0"}
    assert request(daemon.socket_path, {"cmd": "check", **key})["ip"] == r["ip"]
    first = request(daemon.socket_path, {"cmd": "del", **key})
    assert first["ok"] and first["released"] and first["ip"] == r["ip"]
    again = request(daemon.socket_path, {"cmd": "del", **key})
    assert again == {"ok": True, "released": False}
    assert request(daemon.socket_path, {"cmd": "check", **key})["ok"] is False


def test_bad_requests_get_one_line_errors(daemon):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(daemon.socket_path))
        s.sendall(b"garbage\n")
        resp = json.loads(s.makefile().readline())
    assert resp["ok"] is False and resp["code"] == 7 and "\n" not in resp["error"]
    resp = request(daemon.socket_path, {"cmd": "nope"})
    assert resp["ok"] is False and "unknown command" in resp["error"]
    resp = request(daemon.socket_path, {"cmd": "add", "containerID": "", "ifName": "eth0"})
    assert resp["ok"] is False


def test_metrics_and_introspection(daemon):
    mport, iport = daemon.ports
    text = get(mport, "/metrics")
    for name in ("awscni_assigned_ip_addresses", "awscni_total_ip_addresses", "awscni_eni_allocated",
                 "awscni_add_ip_req_count", "awscni_aws_api_latency_ms_count"):
        assert f"\n{name}" in text or text.startswith(name) or f"# TYPE {name}" in text
    wait_for(lambda: 'awscni_reconcile_count{fn="nodeIPPoolReconcile"}' in get(mport, "/metrics"),
             timeout=15, what="a reconcile (every 3 s at scale 0.05)")
    enis = json.loads(get(iport, "/v1/enis"))
    assert enis["AssignedIPs"] >= 12 and len(enis["ENIs"]) >= 2
    held = [a for e in enis["ENIs"].values() for c in e["AvailableIPv4Cidrs"].values()
            for a in c["IPAddresses"].values() if a["IPAMKey"]["containerID"]]
    assert len(held) == enis["AssignedIPs"]
    pods = json.loads(get(iport, "/v1/pods"))
    assert len(pods) == enis["AssignedIPs"] and any(k.startswith("p1__c1") for k in pods)
    assert json.loads(get(iport, "/v1/ipamd-env-settings"))["CNIKIT_PROFILE"] == "hardened"


def test_sigkill_and_restart_recovers_allocations(daemon):
    before = {a["containerID"]: a["ipv4"] for a in daemon.checkpoint()["allocations"]}
    assert len(before) >= 12
    daemon.kill(signal.SIGKILL)
    assert daemon.socket_path.exists(), "a killed daemon leaves its socket file"
    daemon.start()
    for cid, ip in before.items():
        r = request(daemon.socket_path, {"cmd": "check", "network": "aws-cni", "containerID": cid,
                                         "ifName": "eth0"})
        assert r["ok"] and r["ip"] == ip, (cid, r)
    r = add(daemon, 500)
    assert r["ok"] and r["ip"] not in before.values()
