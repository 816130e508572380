"""The reference daemon's IPv6 mode (cnikit/daemon/ipv6.py) on in-memory EC2 and IMDS: one
/80 on the primary ENI, pods addressed from it as upstream's getUnusedIP does, no pool
manager, and how each profile takes an ENI of the other family at start-up (#3489)."""

from __future__ import annotations

import ipaddress

import pytest

from cnikit.daemon.apis import ApiError
from cnikit.daemon.checkpoint import JsonCheckpoint
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import from_env
from cnikit.daemon.fakes import FakeEc2, FakeImds
from cnikit.errors import UsageError
from tests.unit.daemon_support import PROFILES_IPV6 as PROFILES
from tests.unit.daemon_support import key, make, settle, start

V6 = {"ipv6": True, "prefix_delegation": True}


@pytest.mark.parametrize("profile", PROFILES)
def test_start_up_takes_one_80_and_no_pool(profile):
    d, ec2, _imds, clock, _ = make(profile, **V6)
    assert ec2.calls.count("assign_ipv6_prefixes") == 1
    (prefix,) = ec2.primary.ipv6_prefixes
    assert d.ds.enis[ec2.primary.eni_id].prefixes() == [prefix]
    ec2.calls.clear()
    settle(d, clock, 120)  # no pool manager, no reconcile in IPv6 mode
    assert ec2.calls == []
    assert len(d.ds.enis) == 1


def test_a_prefix_ec2_shows_already_is_reused_not_added_to():
    ec2 = FakeEc2()
    ec2.assign_ipv6_prefixes(ec2.primary.eni_id, 2)
    first = ec2.primary.ipv6_prefixes[0]
    ec2.calls.clear()
    d = start("hardened", ec2, FakeImds(ec2), FakeClock(), None, **V6)
    assert "assign_ipv6_prefixes" not in ec2.calls  # EC2 had /80s: none assigned
    assert d.ds.enis[ec2.primary.eni_id].prefixes() == [first]


def test_pods_count_up_from_the_prefix_base_and_reuse_after_cooldown():
    d, ec2, _imds, clock, _ = make("hardened", **V6)
    net = ipaddress.IPv6Network(ec2.primary.ipv6_prefixes[0])
    got = [d.add(key(n)).ip for n in range(3)]
    assert got == [str(net[0]), str(net[1]), str(net[2])]  # upstream: <prefix>:: first
    d.delete(key(1))
    assert d.add(key(3)).ip == str(net[3])  # net[1] is cooling down
    clock.advance(d.cfg.ip_cooldown_scaled + 1)
    assert d.add(key(4)).ip == str(net[1])  # released and cooled: before any new one


def test_a_restart_keeps_the_pods_on_their_addresses(tmp_path):
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    d = start("hardened", ec2, FakeImds(ec2), clock, ckpt, **V6)
    held = {n: d.add(key(n)).ip for n in range(2)}
    assert all("ipv6" in row for row in ckpt.read())  # upstream's field for an IPv6 pod
    again = start("hardened", ec2, FakeImds(ec2), clock, ckpt, **V6)
    assert {n: again.check(key(n)).ip for n in range(2)} == held
    assert again.add(key(2)).ip not in held.values()


def test_an_unmanaged_ipv4_only_eni_fails_v1_20_4_start_up_only(monkeypatch):
    """#3489: an ENI of an IPv4-only subnet has no subnet-ipv6-cidr-blocks in IMDS."""
    for profile in PROFILES:
        ec2 = FakeEc2()
        imds = FakeImds(ec2)
        primary_view = imds.enis()[0]
        primary_view.subnet_ipv6_cidr = "2600:1f18:aaaa:bb00::/64"
        other = type(primary_view)("eni-v4only", mac="0a:00:00:00:00:99", device_index=1,
                                   primary_ip="10.0.2.10", ips=["10.0.2.10"],
                                   subnet_ipv6_cidr=None)
        monkeypatch.setattr(imds, "enis", lambda ipv6=False, v=[primary_view, other]: v)
        if profile == "vpc-cni-1.20.4":
            with pytest.raises(ApiError, match="failed to retrieve ENI metadata"):
                start(profile, ec2, imds, FakeClock(), None, **V6)
        else:
            d = start(profile, ec2, imds, FakeClock(), None, **V6)
            assert list(d.ds.enis) == [ec2.primary.eni_id]


@pytest.mark.parametrize("env, why", [
    ({"ENABLE_IPv6": "true", "ENABLE_PREFIX_DELEGATION": "true"}, "dual stack"),
    ({"ENABLE_IPv6": "true", "ENABLE_IPv4": "false"}, "ENABLE_PREFIX_DELEGATION"),
    ({"ENABLE_IPv4": "false"}, "no address family"),
    ({"CNIKIT_V4_EGRESS_RANGE": "169.254.172.0/31"}, "too small"),
])
def test_bad_family_settings_are_one_line_errors(env, why):
    with pytest.raises(UsageError, match=why):
        from_env(env)


def test_ipv6_settings_read_as_upstream_names_them():
    cfg = from_env({"ENABLE_IPv6": "true", "ENABLE_IPv4": "false",
                    "ENABLE_PREFIX_DELEGATION": "true"})
    assert cfg.ipv6 and cfg.prefix_delegation and cfg.v4_egress
    assert cfg.v4_egress_range == "169.254.172.0/22"
