"""Pods handed to CNI plugins exactly as a runtime does: the reference ptp plugin
(containernetworking-plugins) and a small static plugin over cnikit.fabric.wiring."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from cnikit.fabric import ec2ops, netns
from cnikit.fabric.cni import CniError
from tests.integration.conftest import needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]
REFERENCE = "/usr/lib/cni"


@pytest.fixture
def static_plugin(tmp_path) -> str:
    """A CNI_PATH directory holding `cnikit-static`, run as a binary like any plugin."""
    d = tmp_path / "cni-bin"
    d.mkdir()
    p = d / "cnikit-static"
    p.write_text(f"#!/bin/sh\nexec {sys.executable} -m cnikit.fabric.static_plugin\n")
    p.chmod(0o755)
    return str(d)


def reach(src, dst, timeout=0.3) -> bool:
    with netns.entered(dst.ns.fd):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with netns.entered(src.ns.fd):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("0.0.0.0", 9997))
        rx.settimeout(timeout)
        tx.sendto(b"x", (dst.ip, 9997))
        try:
            return rx.recvfrom(8)[1][0] == src.ip
        except TimeoutError:
            return False


def all_reach(pods) -> bool:
    return all(reach(a, b) for a in pods for b in pods if a is not b)


def test_static_plugin_pods_across_nodes_reach_each_other(make_fabric, fab_cloud, static_plugin):
    fabric = make_fabric(nodes=2)
    pods = []
    for n in range(2):
        for ip, _dev in ec2ops.assign_pod_ips(fab_cloud, fabric, n, 2):
            conf = {"cniVersion": "1.0.0", "name": "ck", "type": "cnikit-static",
                    "ipam": {"addresses": [{"address": f"{ip}/32"}]}}
            pods.append(fabric.add_pod_cni(n, conf, [static_plugin]))
    for pod in pods:
        assert pod.cni.result.ips == [f"{pod.ip}/32"]
        assert pod.cni.result.sandbox_iface["sandbox"] == pod.path
    wait_until(lambda: all_reach(pods), 3.0, what="every pod reaching every other")

    gone = pods.pop()
    veth = gone.cni.result.interfaces[0]["name"]
    fabric.delete_pod(gone)
    assert not netns.exists(gone.name) and gone.node.ns.nl.link(veth) is None
    assert not any(r.dst == f"{gone.ip}/32" for r in gone.node.ns.nl.rules())
    gone.cni.delete()  # DEL again: idempotent


def test_reference_ptp_plugin_pods_reach_each_other(make_fabric, fab_cloud, tmp_path):
    if not Path(REFERENCE, "ptp").exists():
        pytest.skip("containernetworking-plugins not installed (make setup)")
    fabric = make_fabric(nodes=2)
    subnet = fabric.topo.subnet_cidr
    host_side = subnet.replace(".0/24", ".254")  # ptp puts the gateway on every host veth
    pods = []
    for n in range(2):
        for ip, _dev in ec2ops.assign_pod_ips(fab_cloud, fabric, n, 2):
            conf = {"cniVersion": "1.0.0", "name": f"ck-{fabric.rid}", "type": "ptp",
                    "ipMasq": False,
                    "ipam": {"type": "host-local", "dataDir": str(tmp_path / f"ipam-{n}"),
                             "ranges": [[{"subnet": subnet, "rangeStart": ip, "rangeEnd": ip,
                                          "gateway": host_side}]],
                             "routes": [{"dst": "0.0.0.0/0"}]}}
            pod = fabric.add_pod_cni(n, conf, [REFERENCE], args={"IgnoreUnknown": "1"})
            assert pod.ip == ip
            pods.append(pod)
    wait_until(lambda: all_reach(pods), 5.0, what="every ptp pod reaching every other")
    for pod in list(pods):
        fabric.delete_pod(pod)
        assert not netns.exists(pod.name)


def test_failing_plugin_leaves_no_namespace(make_fabric, static_plugin):
    fabric = make_fabric(nodes=1)
    before = set(netns.names(f"ck-{fabric.rid}-"))
    conf = {"cniVersion": "1.0.0", "name": "ck", "type": "cnikit-static"}  # no IP
    with pytest.raises(CniError, match="no IP"):
        fabric.add_pod_cni(0, conf, [static_plugin])
    with pytest.raises(CniError, match="not found in CNI_PATH"):
        fabric.add_pod_cni(0, {"cniVersion": "1.0.0", "name": "x", "type": "nope"},
                           [static_plugin])
    assert set(netns.names(f"ck-{fabric.rid}-")) == before and not fabric.pods


def test_plugin_result_is_checked_against_the_namespace(make_fabric, fab_cloud, tmp_path):
    """A plugin that claims an IP it did not configure is caught."""
    fabric = make_fabric(nodes=1)
    d = tmp_path / "liar"
    d.mkdir()
    liar = d / "liar"
    liar.write_text('#!/bin/sh\ncat >/dev/null\n[ "$CNI_COMMAND" = ADD ] && '
                    'echo \'{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"\'$CNI_NETNS\'"}],'
                    '"ips":[{"address":"10.99.0.9/32","interface":0}]}\'\nexit 0\n')
    liar.chmod(0o755)
    with pytest.raises(CniError, match="eth0 is missing"):
        fabric.add_pod_cni(0, {"cniVersion": "1.0.0", "name": "x", "type": "liar"}, [str(d)])
    assert not fabric.pods and os.listdir(d) == ["liar"]
