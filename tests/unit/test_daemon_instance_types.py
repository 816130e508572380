"""The reference daemon's ENI limits, as upstream's FetchInstanceTypeLimits finds them: its
own table, DescribeInstanceTypes for a type newer than it (#2468), no start-up for a type
neither has."""

from __future__ import annotations

import threading

import pytest

from cnikit.cloud.limits import FALLBACK
from cnikit.daemon import type_limits
from cnikit.daemon.apis import ApiError, Limits
from cnikit.daemon.checkpoint import MemoryCheckpoint
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config
from cnikit.daemon.ec2_query import QueryEc2
from cnikit.daemon.fakes import FakeEc2, FakeImds
from cnikit.daemon.ipamd import IpamD
from cnikit.daemon.profiles import registry as profiles
from cnikit.errors import CnikitError

PROFILES = sorted(profiles())


def started(profile: str, instance_type: str):
    ec2 = FakeEc2(instance_type=instance_type)
    d = IpamD(Config(profile=profile), ec2, FakeImds(ec2), FakeClock(), MemoryCheckpoint())
    d.start()
    return d, ec2


@pytest.mark.parametrize("profile", PROFILES)
def test_a_type_in_the_daemons_table_is_not_asked_of_ec2(profile):
    d, ec2 = started(profile, "t3.small")
    assert d.limits == Limits(3, 4) and d.capacity.slots_per_eni == 3
    assert "instance_limits" not in ec2.calls


@pytest.mark.parametrize("profile", PROFILES)
def test_a_type_newer_than_the_table_is_sized_from_describe_instance_types(profile):
    assert "t3a.small" not in FALLBACK
    d, ec2 = started(profile, "t3a.small")
    assert d.limits == Limits(2, 4) and d.capacity.max_enis == 2
    assert ec2.calls.count("instance_limits") == 1
    (event,) = [e for e in d.events if e["kind"] == "instance-limits"]
    assert event["source"] == "ec2" and event["instance_type"] == "t3a.small"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_type_neither_table_nor_ec2_has_stops_the_start_up(profile):
    with pytest.raises(type_limits.UnknownInstanceType, match="x9.preview"):
        started(profile, "x9.preview")


def test_a_throttled_describe_instance_types_is_retried_not_fatal():
    ec2 = FakeEc2(instance_type="t3a.small")
    ec2.fail["instance_limits"] = "RequestLimitExceeded"
    with pytest.raises(ApiError):
        type_limits.instance_limits(ec2, "t3a.small")


def test_the_daemon_exits_with_one_line_on_an_unknown_type():
    from cnikit.daemon.main import start_with_retry

    class Stuck:
        def start(self):
            raise type_limits.UnknownInstanceType("no ENI limits for instance type x9.preview")

    with pytest.raises(CnikitError, match="cannot start: no ENI limits for instance type x9"):
        start_with_retry(Stuck(), threading.Event(), None)


def test_the_gate_describes_a_type_outside_the_table_with_ec2s_figures(gate_cloud):
    ec2 = QueryEc2(gate_cloud.endpoint, gate_cloud.region)
    assert type_limits.instance_limits(ec2, "t3a.small") == (Limits(2, 4), "ec2")
    assert type_limits.instance_limits(ec2, "m5.large") == (Limits(3, 10), "table")
    with pytest.raises(type_limits.UnknownInstanceType):
        type_limits.instance_limits(ec2, "x9.preview")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_primary_eni_is_ec2s_whatever_its_device_index(profile):
    """HyperPod's layout (upstream #3753): the primary ENI at device index 1 is still the
    one never freed, and an ENI at device index 0 that is not it may be."""
    ec2 = FakeEc2()
    ec2.primary.device_index = 1
    d = IpamD(Config(profile=profile), ec2, FakeImds(ec2), FakeClock(), MemoryCheckpoint())
    d.start()
    assert d.ds.enis[ec2.primary.eni_id].is_primary
    assert not any(e.is_primary for e in d.ds.enis.values() if e.eni_id != ec2.primary.eni_id)
