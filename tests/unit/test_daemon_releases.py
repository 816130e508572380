"""Addresses EC2 refuses to take back, takes back on its own, or gives back: what the daemon
may keep, hand out again, or must leave out (quarantine, the release file)."""

from __future__ import annotations

import pytest

from cnikit.daemon import reconcile
from cnikit.daemon.checkpoint import (
    JsonCheckpoint,
    MemoryCheckpoint,
)
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.fakes import LIMITS, FakeEc2, FakeImds
from tests.unit.daemon_support import (
    PROFILES,
    allocatable,
    key,
    on_disk,
    pod_ips,
    pool_matches_ec2,
    settle,
    start,
)

# Upstream leaves such addresses out of its datastore (the reconcile takes back what EC2 still
# shows); hardened keeps them known but quarantined until EC2 and IMDS settle them. Neither
# hands them out again on the daemon's own assumption.


def over_target(profile):
    """Three pods, two deleted and out of the IP cooldown: the next tick releases; returns
    the daemon and the addresses that release will ask EC2 to take."""
    ec2, clock = FakeEc2(), FakeClock()
    d = start(profile, ec2, FakeImds(ec2), clock, MemoryCheckpoint(), warm_ip_target=1)
    for n in range(3):
        d.add(key(n))
    settle(d, clock, 5)
    d.delete(key(0))
    d.delete(key(1))
    clock.advance(31)
    victims = [c.split("/")[0] for _, c in d.ds.free_cidrs(False)[: d.decision().over]]
    assert victims
    return d, ec2, clock, victims


@pytest.mark.parametrize("profile", PROFILES)
def test_a_release_ec2_refuses_as_not_on_the_eni_is_not_kept_as_free(profile):
    d, ec2, clock, victims = over_target(profile)
    eni = ec2.primary.eni_id
    ec2.take_back(eni, victims[0])  # EC2 no longer has it on this ENI: Unassign refuses
    d.tick()
    assert d.metrics.get("awscni_ipamd_error_count", fn="decreaseIPPool") == 1
    assert victims[0] not in allocatable(d), "kept an address EC2 refused to release"
    assert d.decision().over == 0, "the pool counts on addresses it cannot hand out"
    got = {d.add(key(n)).ip for n in range(10, 16)}
    assert victims[0] not in got
    for _ in range(3):  # the reconcile learns EC2's truth about the others of that call
        clock.advance(61)
        d.reconcile()
    assert victims[0] not in d.ds.enis[eni].ips()
    assert pool_matches_ec2(d, ec2) and not d.ds.quarantined


@pytest.mark.parametrize("profile", PROFILES)
def test_a_throttled_release_is_learnt_back_from_ec2_not_assumed(profile):
    d, ec2, clock, victims = over_target(profile)
    eni = ec2.primary.eni_id
    ec2.fail["unassign_ips"] = "RequestLimitExceeded"
    d.tick()
    assert not set(victims) & allocatable(d) and d.decision().over == 0
    if profile == "hardened":  # still on the ENI: known to the daemon, so no leak
        assert set(victims) <= set(d.ds.enis[eni].ips())
    del ec2.fail["unassign_ips"]
    for _ in range(3):
        clock.advance(61)
        d.reconcile()
    assert set(victims) <= set(ec2.all_ips()) and pool_matches_ec2(d, ec2), "leaked"
    assert not d.ds.quarantined
    settle(d, clock, 40)  # and the pool manager releases them properly this time
    assert pool_matches_ec2(d, ec2) and d.within_targets()


@pytest.mark.parametrize("garbage", ["", "{", '{"version": "other", "released": {}}',
                                     '{"version": "cnikit-released/1", "released": []}'])
def test_an_unreadable_release_file_is_no_release(tmp_path, garbage):
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ckpt.released_path.write_text(garbage)
    assert ckpt.read_released() == {}
    ec2, clock = FakeEc2(), FakeClock()
    d = start("hardened", ec2, FakeImds(ec2), clock, ckpt)
    assert d.add(key(1)).ip


def test_an_address_ec2_gives_back_to_the_node_is_no_longer_a_release(tmp_path):
    """EC2 hands a released address straight back out, here to this node's own Assign: it
    is the node's again, in the pool before and after a restart (not left out as a
    release, which would leak it for as long as both views show it)."""
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    ec2.reuse_freed = True
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    pods = {n: d.add(key(n)).ip for n in range(3)}
    settle(d, clock, 5)
    d.delete(key(0))
    settle(d, clock, 35)
    assert pods[0] not in ec2.all_ips(), "the pool should have released it"
    for n in range(10, 13):
        d.add(key(n))
    settle(d, clock, 1)
    eni = ec2.primary.eni_id
    assert pods[0] in ec2.enis[eni].ips, "EC2 should have handed it back to this node"
    assert pods[0] not in ckpt.read_released()
    d2 = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    for _ in range(reconcile.HARDENED_FULL_CHECK_EVERY):
        clock.advance(61)
        d2.reconcile()
    assert pool_matches_ec2(d2, ec2), "an address of this node's leaked"


def give_back(ec2: FakeEc2, eni_id: str, ip: str) -> None:
    ec2.enis[eni_id].ips.append(ip)
    ec2.used.add(ip)


@pytest.mark.parametrize("restarts", [1, 2])
def test_an_address_ec2_took_from_a_pod_across_restarts_goes_back_to_that_pod(tmp_path, restarts):
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
    victim = d.add(key(0))
    pod_ips(d, clock, 1, 2)
    settle(d, clock, 5)
    ec2.take_back(victim.eni_id, victim.ip)  # another interface has it (AllowReassignment)
    for _ in range(restarts):  # restarted while it is away: neither Describe nor IMDS has it
        d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
        settle(d, clock, 5)
    give_back(ec2, victim.eni_id, victim.ip)  # EC2 hands it back to the node
    settle(d, clock, 130)  # reconciles see it in both sources
    assert d.check(key(0)) is not None and d.check(key(0)).ip == victim.ip
    fresh = pod_ips(d, clock, 10, 6)
    assert victim.ip not in fresh, "a second pod got the address its first pod still uses"


def test_a_pod_deleted_while_its_address_is_away_leaves_nothing_behind(tmp_path):
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
    victim = d.add(key(0))
    settle(d, clock, 5)
    ec2.take_back(victim.eni_id, victim.ip)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    d.delete(key(0))  # the runtime's DEL
    assert not any(r["containerID"] == "sandbox-0" for r in ckpt.read())
    give_back(ec2, victim.eni_id, victim.ip)
    settle(d, clock, 130)
    assert d.check(key(0)) is None


def test_the_eni_an_address_was_taken_from_keeps_room_for_it_across_a_restart(tmp_path):
    """Filling the slot the taken address left would make EC2 refuse to hand it back
    (PrivateIpAddressLimitExceeded), and its pod would stay dark."""
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
    victim = d.add(key(0))
    pod_ips(d, clock, 1, 8)  # nine pods: the primary ENI's nine secondary IPs
    settle(d, clock, 5)
    assert victim.eni_id == ec2.primary.eni_id
    ec2.take_back(victim.eni_id, victim.ip)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    pod_ips(d, clock, 20, 4)  # the pool grows
    settle(d, clock, 5)
    limit = LIMITS[ec2.instance_type].ipv4_per_eni
    assert len(ec2.enis[victim.eni_id].ips) < limit, "no room left to hand the address back"
