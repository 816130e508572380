"""Instance types on a live cluster (hardened): a run that mixes types sizes each node's pool
by its own type, and a type newer than the daemon's table (upstream #2468) is sized from
EC2's DescribeInstanceTypes."""

from __future__ import annotations

import os

import pytest

from tests.integration.test_cluster_subnets import added

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]


def node_enis(c, node: int) -> list:
    """The node's ENIs as EC2 (the gate) holds them."""
    instance = c.instance_id(node)
    return [e for e in c.cloud.gate.owners().enis.values() if e.instance_id == instance]


def described_type(c, node: int) -> str:
    res = c.cloud.client().describe_instances(InstanceIds=[c.instance_id(node)])
    return res["Reservations"][0]["Instances"][0]["InstanceType"]


def test_each_node_of_a_mixed_run_keeps_its_own_types_limits():
    from cnikit.cloud.limits import FALLBACK
    from cnikit.cluster import CniCluster

    types = ["t3.small", "m5.large"]  # 3 ENIs x 4 IPv4 addresses, and 3 x 10
    with CniCluster(nodes=2, profile="hardened", scale=0.05, instance_types=types) as c:
        assert [described_type(c, n) for n in (0, 1)] == types
        # t3.small's four pods need a second ENI (three secondaries each); m5.large's fit
        # on its first
        for node in (0, 1):
            for n in range(4):
                added(c, f"n{node}p{n}", node)
        for node, itype in enumerate(types):
            lim = FALLBACK[itype]
            assert c.status(node)["limits"] == {"max_enis": lim.max_enis,
                                                "ipv4_per_eni": lim.ipv4_per_eni}
            enis = node_enis(c, node)
            assert len(enis) <= lim.max_enis
            assert all(len(e.ips) <= lim.ipv4_per_eni for e in enis), [e.ips for e in enis]
        small = node_enis(c, 0)
        assert any(len(e.ips) == 4 for e in small), [e.ips for e in small]
        assert len(small) >= 2
        assert max(len(e.ips) for e in node_enis(c, 1)) > 4


def test_a_type_outside_the_daemons_table_is_sized_from_describe_instance_types():
    from cnikit.cloud.limits import FALLBACK
    from cnikit.cluster import CniCluster

    itype = "t3a.small"  # EC2 (moto) knows it: 2 ENIs x 4 IPv4 addresses
    assert itype not in FALLBACK
    with CniCluster(nodes=1, profile="hardened", scale=0.05, instance_types=[itype]) as c:
        assert c.status(0)["limits"] == {"max_enis": 2, "ipv4_per_eni": 4}
        asked = [e for e in c.status(0)["events"] if e["kind"] == "instance-limits"]
        assert asked and asked[0]["source"] == "ec2", asked
        pods = [added(c, f"p{n}") for n in range(6)]  # two ENIs' three secondaries each
        assert len({p.ip for p in pods}) == 6
        enis = node_enis(c, 0)
        assert len(enis) == 2 and all(len(e.ips) == 4 for e in enis), [e.ips for e in enis]
