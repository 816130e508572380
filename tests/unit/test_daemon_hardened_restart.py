"""A restart while EC2's Describe lags, and releases EC2 refuses: what the daemon may keep.

Fake clock and in-memory EC2/IMDS views, like test_daemon_core. The case behind these
(random-chaos, seed 22): the daemon releases an address, restarts while Describe still
shows it, takes it as free, fails to release it again (EC2 no longer has it), keeps it,
and gives it to a pod whose address EC2 assigned to no one.
"""

from __future__ import annotations

import copy

import pytest

from cnikit.daemon import profiles, reconcile
from cnikit.daemon.apis import ApiError
from cnikit.daemon.checkpoint import JsonCheckpoint, MemoryCheckpoint
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config
from cnikit.daemon.datastore import IpamKey
from cnikit.daemon.fakes import LIMITS, FakeEc2, FakeImds
from cnikit.daemon.ipamd import IpamD

PROFILES = profiles.names()


def key(n: int) -> IpamKey:
    return IpamKey("aws-cni", f"sandbox-{n}", "eth0")


def start(profile, ec2, imds, clock, ckpt, **cfg) -> IpamD:
    d = IpamD(Config(profile=profile, **cfg), ec2, imds, clock, ckpt)
    d.start()
    return d


def settle(d, clock, seconds):
    end = clock.now() + seconds
    while clock.now() < end:
        clock.advance(d.cfg.pool_interval)
        d.tick()


def lag_describe(ec2: FakeEc2):
    """From now on Describe shows the ENIs as they are at this moment (until restored)."""
    before = ec2.describe_enis(ec2.instance_id)
    real = ec2.describe_enis
    ec2.describe_enis = lambda instance_id: copy.deepcopy(before)
    return real


def pool_matches_ec2(d, ec2) -> bool:
    """Every ENI the daemon uses holds in its datastore exactly what EC2 has on it."""
    return all(set(eni.ips()) == set(ec2.enis[eni_id].secondary_ips)
               for eni_id, eni in d.ds.enis.items())


# ---- start-up under a lagging Describe (hardened) -----------------------------------------

def test_restart_right_after_a_release_leaves_out_what_a_lagging_describe_still_shows(tmp_path):
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    pods = {n: d.add(key(n)).ip for n in range(3)}
    settle(d, clock, 5)
    real = lag_describe(ec2)  # Describe keeps showing the pool as it is now
    d.delete(key(0))
    d.delete(key(1))
    settle(d, clock, 35)  # out of the IP cooldown and over WARM_IP_TARGET: released
    released = {pods[0], pods[1]} - set(ec2.all_ips())
    assert released, "the pool should have released a freed address"

    d2 = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)  # the old record is gone
    assert not released & allocatable(d2), "a released address is free again"
    assert d2.check(key(2)).ip == pods[2]
    fresh = {d2.add(key(n)).ip for n in range(10, 15)}
    assert not released & fresh, "a pod got an address EC2 no longer assigns to this node"
    assert d2.metrics.get("awscni_ipamd_error_count", fn="startupAddUnconfirmed") >= 1

    ec2.describe_enis = real  # EC2 catches up: the pool and EC2 agree
    for _ in range(reconcile.HARDENED_FULL_CHECK_EVERY):
        clock.advance(61)
        d2.reconcile()
    assert pool_matches_ec2(d2, ec2)


def test_restart_right_after_freeing_an_eni_leaves_it_out(tmp_path):
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt)
    for n in range(12):
        d.add(key(n))
    settle(d, clock, 10)
    assert d.ds.stats().enis == 3
    lag_describe(ec2)  # three ENIs, as Describe keeps showing them
    for n in range(12):
        d.delete(key(n))
    settle(d, clock, 120)
    assert d.ds.stats().enis == 1
    freed = {ip for e in ec2.describe_enis(ec2.instance_id) for ip in e.ips} - set(ec2.all_ips())

    d2 = start("hardened", ec2, imds, clock, ckpt)
    assert set(d2.ds.enis) == {ec2.primary.eni_id}, "a freed ENI came back at restart"
    assert not freed & {d2.add(key(n)).ip for n in range(20, 29)}


def test_restart_keeps_pods_on_addresses_a_stale_imds_does_not_show(tmp_path):
    """The other way round: IMDS behind the node's assigns, Describe current. A pod's
    address stays the pod's; free addresses IMDS misses come back with the reconcile."""
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=2)
    eni = ec2.primary.eni_id
    imds.freeze(eni)
    pods = {n: d.add(key(n)).ip for n in range(5)}
    settle(d, clock, 5)
    d2 = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=2)
    assert {n: d2.check(key(n)).ip for n in pods} == pods
    imds.thaw()
    for _ in range(3):
        clock.advance(61)
        d2.reconcile()
        d2.pool_step()
    assert pool_matches_ec2(d2, ec2) and d2.within_targets()


def test_restart_with_imds_failing_hands_out_nothing_unconfirmed(tmp_path):
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    pods = {n: d.add(key(n)).ip for n in range(3)}
    settle(d, clock, 5)
    real = lag_describe(ec2)
    d.delete(key(0))
    settle(d, clock, 35)
    released = {pods[0]} - set(ec2.all_ips())
    assert released
    enis = imds.enis
    calls = iter(range(3))

    def flaky():
        if next(calls, 0) == 1:  # the subnet read passes, the start-up check fails
            raise ApiError("IMDS unavailable", "ServiceUnavailable")
        return enis()
    imds.enis = flaky
    d2 = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=3)  # no release at start
    assert not released & {d2.add(key(n)).ip for n in range(10, 14)}
    ec2.describe_enis = real
    imds.enis = enis
    for _ in range(reconcile.HARDENED_FULL_CHECK_EVERY):
        clock.advance(61)
        d2.reconcile()
    assert pool_matches_ec2(d2, ec2)


# ---- a release EC2 refuses ------------------------------------------------------------------
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


def allocatable(d) -> set[str]:
    return {ip for eni in d.ds.enis.values() for ip in eni.ips()
            if f"{ip}/32" not in d.ds.quarantined}


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


def test_an_eni_the_reconcile_takes_back_brings_only_what_imds_shows_too(tmp_path):
    """IMDS hid an ENI at restart (so it was left out); when IMDS shows it again, a
    lagging Describe still lists an address released from it before the restart."""
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt)
    for n in range(12):
        d.add(key(n))
    settle(d, clock, 10)
    spare = next(e for e in d.ds.enis.values() if e.device_number and not e.assigned_count())
    lag_describe(ec2)
    gone = spare.ips()[0]
    ec2.take_back(spare.eni_id, gone)  # released just before the restart
    imds.hide(spare.eni_id)
    d2 = start("hardened", ec2, imds, clock, ckpt)
    assert spare.eni_id not in d2.ds.enis
    imds.thaw()
    clock.advance(61)
    d2.reconcile()
    assert spare.eni_id in d2.ds.enis and gone not in d2.ds.enis[spare.eni_id].ips()


# ---- a stale IMDS and a lagging Describe at once, past the reconcile cooldown -------------

def test_an_address_both_views_still_show_long_after_its_release_stays_out():
    """Both views lag the release by minutes: their agreement is no evidence the address is
    the node's again (EC2 may have given it to another node). Once both let it go, a later
    assignment to this ENI is taken like any other."""
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, MemoryCheckpoint(), warm_ip_target=1)
    pods = {n: d.add(key(n)).ip for n in range(3)}
    settle(d, clock, 5)
    eni = ec2.primary.eni_id
    imds.freeze(eni)
    real = lag_describe(ec2)
    d.delete(key(0))
    settle(d, clock, 35)
    assert pods[0] not in ec2.all_ips(), "the pool should have released it"
    for _ in range(2 * reconcile.HARDENED_FULL_CHECK_EVERY):  # ten minutes of lag
        clock.advance(61)
        d.reconcile()
        assert pods[0] not in d.ds.enis[eni].ips(), "re-added on two lagging views"
    ec2.describe_enis = real
    imds.thaw()
    for _ in range(reconcile.HARDENED_FULL_CHECK_EVERY):  # both caught up: settled
        clock.advance(61)
        d.reconcile()
    ec2.enis[eni].ips.append(pods[0])  # EC2 assigns it to this ENI again
    for _ in range(3):
        clock.advance(61)
        d.reconcile()
    assert pods[0] in d.ds.enis[eni].ips()


def test_a_restart_recalls_releases_both_lagging_views_still_show(tmp_path):
    """The same across a restart: the new process recalls the old one's releases from the
    file beside ipam.json, instead of taking the address as free on both views' word."""
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    pods = {n: d.add(key(n)).ip for n in range(3)}
    settle(d, clock, 5)
    eni = ec2.primary.eni_id
    imds.freeze(eni)
    lag_describe(ec2)
    d.delete(key(0))
    settle(d, clock, 35)
    assert pods[0] not in ec2.all_ips(), "the pool should have released it"
    assert pods[0] in JsonCheckpoint(tmp_path / "ipam.json").read_released()
    clock.advance(2)  # killed and restarted
    d2 = start("hardened", ec2, imds, clock, JsonCheckpoint(tmp_path / "ipam.json"),
               warm_ip_target=3)  # no release at start-up
    assert pods[0] not in allocatable(d2), "a released address is free again"
    assert pods[0] not in {d2.add(key(n)).ip for n in range(10, 14)}
    assert d2.check(key(1)).ip == pods[1] and d2.check(key(2)).ip == pods[2]


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


# ---- a pod's address EC2 took away, across a restart (random-chaos compounds) --------------

def give_back(ec2: FakeEc2, eni_id: str, ip: str) -> None:
    ec2.enis[eni_id].ips.append(ip)
    ec2.used.add(ip)


def pod_ips(d, clock, first: int, n: int) -> list[str]:
    out = []
    for i in range(first, first + n):
        a = d.add(key(i))
        while a is None:  # the pool grows on its next pass
            settle(d, clock, d.cfg.pool_interval)
            a = d.add(key(i))
        out.append(a.ip)
    return out


@pytest.mark.parametrize("restarts", [1, 2])
def test_an_address_ec2_took_from_a_pod_across_restarts_goes_back_to_that_pod(tmp_path, restarts):
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
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
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
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
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
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


def test_an_unconfirmed_address_at_restart_still_takes_its_slot(tmp_path):
    """IMDS behind the pool's last assign at a restart: the address EC2 has is not handed
    out yet, but the pool must not count its slot free either (EC2 refuses an assign on a
    full ENI, and the ADDs waiting for it fail)."""
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    pod_ips(d, clock, 0, 7)  # seven pods and one warm IP on the primary ENI
    eni = ec2.primary.eni_id
    imds.freeze(eni)
    pod_ips(d, clock, 7, 1)
    settle(d, clock, 1)  # the pool's ninth IP, which the stale IMDS does not show
    assert len(ec2.enis[eni].secondary_ips) == LIMITS[ec2.instance_type].ipv4_per_eni - 1
    d2 = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    assert d2.add(key(99)).eni_id != eni
    assert d2.metrics.get("awscni_ipamd_error_count", fn="increaseIPPool") == 0


def test_a_restart_whose_describe_predates_the_eni_gives_its_pods_their_addresses_back(tmp_path):
    # The CI case (restart-lagging-describe under load): a Describe lagging further back
    # than the node's life shows no ENI at start-up, so every checkpointed pod is lost;
    # when the reconcile then takes the ENI in whole, its pods' addresses are theirs again,
    # never free.
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    held = pod_ips(d, clock, 0, 3)
    settle(d, clock, 5)
    real = ec2.describe_enis
    ec2.describe_enis = lambda instance_id: []  # before the instance had its ENI
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    ec2.describe_enis = real  # Describe catches up
    settle(d, clock, 130)
    for n, ip in enumerate(held):
        assert d.check(key(n)) is not None and d.check(key(n)).ip == ip
    fresh = pod_ips(d, clock, 10, 4)
    assert not set(held) & set(fresh), "a second pod got an address its first pod still uses"
    assert all(ip in ec2.enis[ec2.primary.eni_id].ips for ip in held), "released under a pod"


# ---- pods' IP cooldowns across a restart ---------------------------------------------

def test_a_restart_keeps_the_ip_cooldown_of_a_pod_deleted_just_before(tmp_path):
    # The CI case (daemon-crash-churn, reference daemon in podman): the daemon crashed
    # right after a pod's DEL and, restarted, gave the address to the next pod 1.27 s
    # later, inside its 1.5 s cooldown. The cooldown rides in the checkpoint.
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    held = pod_ips(d, clock, 0, 3)
    settle(d, clock, 5)
    d.delete(key(0))
    clock.advance(1.0)
    assert [r["ipv4"] for r in ckpt.read()] == held[1:], "upstream's allocations, unchanged"
    d = start("hardened", ec2, imds, clock, ckpt, warm_ip_target=1)
    fresh = pod_ips(d, clock, 10, 4)
    assert held[0] not in fresh, "a restart handed a cooling address to the next pod"
    assert held[0] in ckpt.read_cooling(), "a second restart keeps it too"
    settle(d, clock, d.cfg.ip_cooldown_scaled)
    d.add(key(20))
    assert held[0] not in ckpt.read_cooling(), "a cooldown that is over is not kept"


def test_a_cooldown_recalled_from_the_checkpoint_ends_on_time():
    ckpt, ec2, clock = MemoryCheckpoint(), FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    d = start("hardened", ec2, imds, clock, ckpt)
    d.add(key(0))
    ip = d.check(key(0)).ip
    d.delete(key(0))
    d = start("hardened", ec2, imds, clock, ckpt)
    cooling = [a for e in d.ds.enis.values() for a in e.addresses() if d.ds.cooling(a)]
    assert [a.ip for a in cooling] == [ip] or ip in d.ds.recalled
    clock.advance(d.cfg.ip_cooldown_scaled + 0.1)
    assert not d.ds.cooling(next(a for e in d.ds.enis.values() for a in e.addresses()
                                 if a.ip == ip))
