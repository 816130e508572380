"""A run mixing instance types: bootstrap launches each node as its own type, in node order,
and a scenario's declaration reaches its cluster."""

from __future__ import annotations

import pytest

from cnikit.errors import UsageError


def test_bootstrap_gives_each_node_its_own_type_in_node_order(gate_cloud):
    types = ["t3.small", "m5.large", "m5.large", "t3.small"]
    topo = gate_cloud.bootstrap(nodes=4, instance_types=types, vpc_cidr="10.201.0.0/16",
                                subnet_cidr="10.201.1.0/24")
    assert [i.instance_type for i in topo.instances] == types
    described = gate_cloud.client().describe_instances(
        InstanceIds=[i.instance_id for i in topo.instances])
    by_id = {i["InstanceId"]: i["InstanceType"] for r in described["Reservations"]
             for i in r["Instances"]}
    assert [by_id[i.instance_id] for i in topo.instances] == types


def test_a_type_list_of_another_length_than_the_nodes_is_refused():
    from cnikit.cluster import CniCluster

    with pytest.raises(UsageError, match="names 1 type.* for 2 node"):
        CniCluster(nodes=2, profile="hardened", instance_types=["t3.small"])
    assert CniCluster(nodes=2, profile="hardened").instance_types == ["m5.large"] * 2


def test_a_scenarios_types_reach_its_cluster():
    from cnikit.scenarios.engine.registry import Scenario
    from cnikit.scenarios.engine.run import make_cluster

    sc = Scenario("mixed", "two types", lambda ctx: None, instance_types=("t3.small", "m5.large"))
    c = make_cluster(sc.nodes, "hardened", 0.05, sc.env, 1, "moto", None,
                     instance_type=sc.instance_type, instance_types=sc.instance_types)
    assert c.instance_types == ["t3.small", "m5.large"] and c.instance_type == "t3.small"
