"""Shared fixtures of the unit tests. Cloud fixtures are named gate_* (owned by cnikit.cloud)."""

from __future__ import annotations

import itertools

import pytest

from cnikit.cloud import Cloud

_vpc_numbers = itertools.count(1)


@pytest.fixture(scope="module")
def gate_cloud():
    """Embedded moto behind the gate, shared by a module's tests."""
    cloud = Cloud.start(ec2="moto", seed=20261130)
    yield cloud
    cloud.stop()


@pytest.fixture(scope="module", params=["moto", pytest.param("localstack", marks=pytest.mark.localstack)])
def gate_upstream_cloud(request):
    """The gate in front of each upstream: embedded moto, then LocalStack when installed."""
    if request.param == "localstack":
        cloud = Cloud.start(ec2="localstack", endpoint=request.getfixturevalue("localstack_url"),
                            seed=20261130)
    else:
        cloud = Cloud.start(ec2="moto", seed=20261130)
    yield cloud
    cloud.stop()


def _new_vpc(cloud: Cloud, nodes: int = 2, instance_type: str = "m5.large",
             subnet_prefix: int = 24):
    n = next(_vpc_numbers)
    cloud.gate.faults.clear()
    return cloud.bootstrap(nodes=nodes, instance_type=instance_type,
                           vpc_cidr=f"10.{n}.0.0/16", subnet_cidr=f"10.{n}.1.0/{subnet_prefix}")


@pytest.fixture
def gate_new_vpc():
    """Factory: a fresh VPC per call, with distinct CIDRs so IP ownership never collides."""
    return _new_vpc


@pytest.fixture
def gate_vpc(gate_upstream_cloud):
    """(cloud, topology): a fresh VPC with two m5.large instances behind each upstream."""
    return gate_upstream_cloud, _new_vpc(gate_upstream_cloud)


@pytest.fixture
def gate_fault_vpc(gate_cloud):
    """(cloud, topology): a fresh one-node VPC on the module's embedded cloud; the gate's
    faults cleared after the test (the gate fault tests)."""
    topo = _new_vpc(gate_cloud, nodes=1)
    yield gate_cloud, topo
    gate_cloud.gate.faults.clear()
