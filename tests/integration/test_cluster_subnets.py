"""Subnet discovery on a live cluster (hardened): the nodes' subnet tagged
`kubernetes.io/role/cni=0`, another subnet of their AZ tagged 1. The daemon's new ENI goes
to the other subnet, and its pods reach the nodes' subnet's pods."""

from __future__ import annotations

import ipaddress
import os

import pytest

from tests.integration.test_fabric_pods import all_reach
from tests.waiting import wait_for

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

TAG = "kubernetes.io/role/cni"
OTHER = "10.0.64.0/24"


def test_a_new_eni_goes_to_the_tagged_subnet_and_its_pods_route():
    from cnikit.cluster import CniCluster

    with CniCluster(nodes=1, profile="hardened", scale=0.05, subnet_tags={TAG: "0"},
                    subnets=[(OTHER, {TAG: "1"})]) as c:
        other = next(iter(c.topo.other_subnets))
        instance = c.instance_id(0)
        # the primary ENI's nine addresses first, then pods that need a new ENI
        pods = [added(c, f"p{n}") for n in range(11)]
        away = [p for p in pods if ipaddress.ip_address(p.ip) in ipaddress.ip_network(OTHER)]
        home = [p for p in pods if p not in away]
        assert away and home, [p.ip for p in pods]
        assert [e.subnet_id for e in c.cloud.gate.owners().enis.values()
                if e.instance_id == instance and e.device_index == 1] == [other]
        assert wait_for(lambda: all_reach([away[0], home[0]]), 5,
                        what="a pod of each subnet reaching the other")


def added(c, name: str, node: int = 0):
    """The pod on `node`, its ADD retried on "try again later" (11) as kubelet does."""
    from cnikit.fabric.cni import CniError

    def attempt():
        try:
            return c.add_pod(node, name)
        except CniError as e:
            if e.code != 11:
                raise
            return None

    return wait_for(attempt, 30, what=f"{name}'s ADD", interval=0.2)
