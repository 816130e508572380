"""The nemesis's acts on a node's own network, by name, on a real node of the reference
daemon: link-down, networkd-restart, delete-veth, set-mtu (cnikit.cluster.nemesis_hostnet)."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from faultcore.errors import SpecError
from tests.waiting import wait_for

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]


@pytest.fixture(scope="module")
def cluster():
    from cnikit.cluster import CniCluster

    with CniCluster(nodes=1, profile="hardened", scale=0.05) as c:
        yield c


def nemesis_ops(cluster, op: str) -> list[dict]:
    return [e for e in cluster.history.entries() if e["process"] == "nemesis" and e["f"] == op]


def mtu(cluster, link: str) -> int:
    out = subprocess.run(["ip", "-n", cluster.fabric.nodes[0].name, "-j", "link", "show", link],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["mtu"]


@pytest.fixture(scope="module")
def spilled(cluster):
    """A pod on the secondary ENI eth1: the primary ENI's addresses fill up first."""
    for i in range(20):
        pod = cluster.add_pod(0, f"fill-{i}")
        if pod.device_index:
            return pod
    pytest.fail("no pod was given an address of a secondary ENI")


def eth1(cluster):
    return wait_for(lambda: cluster.node_netlink(0).link("eth1"), 20,
                    what="the secondary ENI's interface eth1")


def test_link_down_takes_the_eni_down_and_brings_it_back(cluster, spilled):
    eth1(cluster)
    nl = cluster.node_netlink(0)
    out = cluster.act("link-down", node=0, device=1, seconds=0.5)
    assert not nl.link("eth1").up
    wait_for(lambda: nl.link("eth1").up, 10, what="eth1 up again")
    ends = wait_for(lambda: [e for e in nemesis_ops(cluster, "host-link-down")
                             if e["type"] == "end"], 5, what="the link's end entry")
    assert ends[-1]["value"]["id"] == out["id"] and ends[-1]["value"]["by"] == "up"


def test_networkd_restart_leaves_only_the_kernels_rules_and_tables(cluster, spilled):
    from cnikit.cluster.nemesis_hostnet import KERNEL_RULES, KERNEL_TABLES

    eth1(cluster)
    pod = spilled
    nl = cluster.node_netlink(0)
    assert any(r.src == f"{pod.ip}/32" for r in nl.rules()), "its rule 1536"
    out = cluster.act("networkd-restart", node=0)
    assert out["rules"] >= 1
    assert {(r.priority, r.table) for r in nl.rules() if not (r.src or r.dst)} <= KERNEL_RULES
    assert not [r for r in nl.rules() if r.src or r.dst]
    assert all(r.table in KERNEL_TABLES for r in nl.routes(table=None))
    # The main table keeps the pod's host route: networkd leaves unmanaged links' routes.
    assert any(r.dst == f"{pod.ip}/32" for r in nl.routes())
    assert nemesis_ops(cluster, "host-flush")[-1]["value"]["rules_removed"] == out["rules"]


def test_delete_veth_removes_the_pods_host_link(cluster):
    from cnikit.cluster.nemesis_hostnet import host_link_of

    pod = cluster.add_pod(0, "vethless")
    nl = cluster.node_netlink(0)
    link = host_link_of(nl, pod.ip)
    assert link and not link.startswith("eth")
    assert cluster.act("delete-veth", pod=pod.name) == {"pod": pod.name, "link": link}
    assert nl.link(link) is None and host_link_of(nl, pod.ip) is None
    assert nemesis_ops(cluster, "host-veth-delete")[-1]["value"]["target"]["link"] == link
    with pytest.raises(ValueError, match="no host veth"):
        cluster.act("delete-veth", pod=pod.name)
    cluster.delete_pod(pod)  # its DEL copes with the veth gone


def test_set_mtu_on_an_eni_and_on_a_pods_veth(cluster):
    from cnikit.cluster.nemesis_hostnet import host_link_of

    pod = cluster.add_pod(0, "jumbo")
    assert cluster.act("set-mtu", node=0, device=0, mtu=9001)["link"] == "eth0"
    assert mtu(cluster, "eth0") == 9001
    link = cluster.act("set-mtu", pod=pod.name, mtu=1400)["link"]
    assert link == host_link_of(cluster.node_netlink(0), pod.ip) and mtu(cluster, link) == 1400
    assert [e["value"]["mtu"] for e in nemesis_ops(cluster, "host-mtu")][-2:] == [9001, 1400]
    cluster.act("set-mtu", node=0, device=0, mtu=1500)
    cluster.delete_pod(pod)


@pytest.mark.parametrize("spec, words", [
    ({"action": "set-mtu", "mtu": 1500}, "exactly one of device and pod"),
    ({"action": "set-mtu", "device": 0, "mtu": 70000}, "mtu must be an integer"),
    ({"action": "link-down", "node": 3}, "node must be one of 0..0"),
    ({"action": "networkd-restart", "node": 0, "rules": "yes"}, "rules must be true or false"),
])
def test_bad_specs_are_refused_in_one_line(cluster, spec, words):
    from cnikit.cluster.actions import act

    before = len(cluster.history.entries())
    with pytest.raises(SpecError, match=words):
        act(cluster.nemesis, spec, 1)
    assert len(cluster.history.entries()) == before, "nothing was done"


def test_only_the_nodes_namespace_is_touched(cluster):
    """The machine's own rules are the same before and after a flush of a node's."""
    from cnikit.fabric.netlink import Netlink

    with Netlink() as host:
        before = host.rules() + host.rules(socket.AF_INET6)
        cluster.act("networkd-restart", node=0)
        assert host.rules() + host.rules(socket.AF_INET6) == before
