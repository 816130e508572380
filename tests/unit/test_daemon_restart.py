"""A daemon restart, per profile: every allocation recovered from the checkpoint, and what it
may take as free when IMDS is stale or failing, Describe lags, or a pod was deleted just before
(its IP cooldown recalled)."""

from __future__ import annotations

import copy

import pytest

from cnikit.daemon import reconcile
from cnikit.daemon.apis import ApiError
from cnikit.daemon.checkpoint import (
    JsonCheckpoint,
    MemoryCheckpoint,
)
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config
from cnikit.daemon.fakes import LIMITS, FakeEc2, FakeImds
from cnikit.daemon.ipamd import IpamD
from tests.unit.daemon_support import (
    PROFILES,
    allocatable,
    key,
    lag_describe,
    make,
    on_disk,
    pod_ips,
    pool_matches_ec2,
    settle,
    start,
)


@pytest.mark.parametrize("profile", PROFILES)
def test_restart_recovers_every_allocation(profile, tmp_path):
    path = tmp_path / "ipam.json"
    d, ec2, _, clock, _ = make(profile, ckpt=JsonCheckpoint(path))
    held = {n: d.add(key(n)).ip for n in range(14)}
    settle(d, clock, 10)
    d2, *_ = make(profile, ckpt=JsonCheckpoint(path), ec2=ec2, clock=clock)
    for n, ip in held.items():
        assert d2.check(key(n)).ip == ip
    fresh = {d2.add(key(100 + n)).ip for n in range(5)}
    assert not fresh & set(held.values())


@pytest.mark.parametrize("profile", PROFILES)
def test_restart_with_stale_imds_readds_ip_ec2_took_back(profile, tmp_path):
    d, ec2, imds, clock, _ = make(profile, ckpt=JsonCheckpoint(tmp_path / "ipam.json"))
    eni = ec2.primary.eni_id
    imds.freeze(eni)
    gone = d.ds.enis[eni].ips()[0]
    ec2.take_back(eni, gone)
    d2 = IpamD(Config(profile=profile), ec2, imds, clock, JsonCheckpoint(tmp_path / "ipam.json"))
    d2.start()
    ips = [d2.add(key(n)).ip for n in range(8)]
    if profile == "hardened":
        assert gone not in d2.ds.enis[eni].ips() and gone not in ips
    else:
        assert gone in d2.ds.enis[eni].ips(), "upstream trusts IMDS at start-up (issue 3887)"


def test_hardened_restart_keeps_pods_a_lagging_describe_does_not_show_yet(tmp_path):
    """A restart right after the pool grew: Describe does not show the new IPs yet, IMDS
    does. Upstream drops such checkpoint rows ("stale"); hardened keeps them for their
    pods, quarantined until EC2 shows them too, and never hands them to another pod."""
    d, ec2, imds, clock, _ = make("hardened", ckpt=JsonCheckpoint(tmp_path / "ipam.json"),
                                  warm_ip_target=1)
    before = ec2.describe_enis(ec2.instance_id)
    shown = {ip for e in before for ip in e.ips}
    pods = {n: d.add(key(n)).ip for n in range(6)}
    settle(d, clock, 5)
    late = {n: ip for n, ip in pods.items() if ip not in shown}
    assert late, "some pods should have IPs EC2 assigned after the snapshot"
    real = ec2.describe_enis
    ec2.describe_enis = lambda instance_id: copy.deepcopy(before)
    d2 = IpamD(Config(profile="hardened", warm_ip_target=1), ec2, imds, clock,
               JsonCheckpoint(tmp_path / "ipam.json"))
    d2.start()
    assert {n: d2.check(key(n)).ip for n in pods} == pods
    assert {f"{ip}/32" for ip in late.values()} == d2.ds.quarantined  # for no one else
    ec2.describe_enis = real  # EC2 catches up: the held IPs are confirmed
    for _ in range(reconcile.HARDENED_FULL_CHECK_EVERY):
        clock.advance(61)
        d2.reconcile()
    assert not d2.ds.quarantined
    assert {n: d2.check(key(n)).ip for n in pods} == pods


@pytest.mark.parametrize("profile", PROFILES)
def test_restart_with_partial_prefix_read_releases_in_use_prefix(profile, tmp_path):
    """Issue 3824's class: after a restart IMDS lists one prefix too few. Upstream takes the
    read at face value and drops the checkpointed pods of the missing /28; the next reconcile
    re-adds it as free, so its addresses are handed to new pods or the /28 goes back to EC2
    while the old pods still use it. Hardened starts from EC2 and keeps both."""
    path = tmp_path / "ipam.json"
    d, ec2, imds, clock, _ = make(profile, ckpt=JsonCheckpoint(path), prefix_delegation=True,
                                  warm_prefix_target=1)
    eni = ec2.primary.eni_id
    held = [d.add(key(n)) for n in range(3)]
    settle(d, clock, 10)
    held_prefix = next(p for p in ec2.enis[eni].prefixes if held[0].ip.startswith(p.rsplit(".", 1)[0]))
    imds.override(eni, prefixes=[p for p in ec2.enis[eni].prefixes if p != held_prefix])
    d2 = IpamD(Config(profile=profile, prefix_delegation=True, warm_prefix_target=1), ec2, imds,
               clock, JsonCheckpoint(path))
    d2.start()
    imds.thaw()
    settle(d2, clock, 200)
    new_ips = {d2.add(key(100 + n)).ip for n in range(20)}
    held_ips = {a.ip for a in held}
    harmed = bool(new_ips & held_ips) or held_prefix not in ec2.enis[eni].prefixes
    if profile == "hardened":
        assert all(d2.check(a.key) == a for a in held) and not harmed
    else:
        assert all(d2.check(a.key) is None for a in held), "the pods' allocations were dropped"
        assert harmed, "the dropped pods' addresses should be reissued or released"


def test_restart_right_after_a_release_leaves_out_what_a_lagging_describe_still_shows(tmp_path):
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
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
    d, ec2, imds, clock, ckpt = on_disk(tmp_path)
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
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=2)
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
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
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


def test_a_restart_recalls_releases_both_lagging_views_still_show(tmp_path):
    """The same across a restart: the new process recalls the old one's releases from the
    file beside ipam.json, instead of taking the address as free on both views' word."""
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
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


def test_an_unconfirmed_address_at_restart_still_takes_its_slot(tmp_path):
    """IMDS behind the pool's last assign at a restart: the address EC2 has is not handed
    out yet, but the pool must not count its slot free either (EC2 refuses an assign on a
    full ENI, and the ADDs waiting for it fail)."""
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
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
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
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


def test_a_restart_keeps_the_ip_cooldown_of_a_pod_deleted_just_before(tmp_path):
    # The CI case (daemon-crash-churn, reference daemon in podman): the daemon crashed
    # right after a pod's DEL and, restarted, gave the address to the next pod 1.27 s
    # later, inside its 1.5 s cooldown. The cooldown rides in the checkpoint.
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, warm_ip_target=1)
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


@pytest.mark.parametrize("profile", PROFILES)
def test_restart_skips_an_eni_imds_lists_and_ec2_deleted(profile, tmp_path):
    """Upstream #1008/#1340 (fixes #1011/#1341): IMDS still lists an ENI that was detached
    and deleted; start-up skips it (EC2 answers NotFound) instead of aborting, and serves."""
    d, ec2, imds, clock, ckpt = on_disk(tmp_path, profile)
    gone = ec2.create_eni(ec2.subnet_id, [], {}, 2).eni_id
    ec2.attach_eni(gone, ec2.instance_id, 1)
    imds.linger(gone)
    ec2.detach_eni(ec2.enis[gone].attachment_id)
    ec2.delete_eni(gone)
    assert gone in {v.eni_id for v in imds.enis()}
    d2 = start(profile, ec2, imds, clock, ckpt)
    assert gone not in d2.ds.enis
    assert d2.metrics.get("awscni_ipamd_error_count", fn="startupDepartedENI") == 1
    ip = d2.add(key(1)).ip
    assert ip in ec2.all_ips()


@pytest.mark.parametrize("profile", PROFILES)
def test_an_eni_detaching_across_a_restart_is_deleted_not_adopted(profile):
    """Upstream #732: a detach takes seconds and Delete answers "in use" meanwhile. The ENI
    stays pending (retried every reconcile); a daemon restarted meanwhile finds it detaching
    in Describe and finishes the job instead of taking it back from IMDS."""
    d, ec2, imds, clock, ckpt = make(profile)
    for n in range(12):
        d.add(key(n))
    settle(d, clock, 10)
    idle = [e for e, eni in d.ds.enis.items()
            if not eni.is_primary and not any(a.assigned for a in eni.addresses())]
    assert idle, "no ENI without pods to free"
    eni_id = idle[0]
    ec2.slow_detach = True
    assert not d.free_eni(eni_id)
    assert eni_id in d.leaving() and eni_id in ec2.enis
    d.reconcile()
    assert eni_id not in d.ds.enis, "the reconcile took a leaving ENI back from IMDS"
    d2 = start(profile, ec2, imds, clock, ckpt)
    assert eni_id not in d2.ds.enis and eni_id in d2.leaving()
    ec2.finish_detaches()
    d2.reconcile()
    assert eni_id not in ec2.enis and not d2.leaving()
