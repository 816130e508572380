"""The daemon's logic on a fake clock with in-memory EC2 and IMDS views: pool, datastore,
checkpoint, recovery and the three reconcile profiles (upstream issues 3019, 1967, 3887)."""

from __future__ import annotations

import copy
import json

import pytest

from cnikit.daemon import profiles, reconcile
from cnikit.daemon.checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    JsonCheckpoint,
    MemoryCheckpoint,
)
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config, from_env
from cnikit.daemon.datastore import IpamKey, NoAvailableIP
from cnikit.daemon.fakes import FakeEc2, FakeImds
from cnikit.daemon.ipamd import TAG_INSTANCE, IpamD
from cnikit.errors import UsageError

PROFILES = profiles.names()  # the registry: a new profile is tested here too


def key(n: int) -> IpamKey:
    return IpamKey("aws-cni", f"sandbox-{n}", "eth0")


def make(profile="hardened", instance_type="m5.large", ckpt=None, ec2=None, clock=None, **cfg):
    ec2 = ec2 or FakeEc2(instance_type=instance_type)
    imds = FakeImds(ec2)
    clock = clock or FakeClock()
    ckpt = ckpt if ckpt is not None else MemoryCheckpoint()
    d = IpamD(Config(profile=profile, **cfg), ec2, imds, clock, ckpt)
    d.start()
    return d, ec2, imds, clock, ckpt


def settle(d, clock, seconds):
    """Run the pool manager every pool interval for `seconds` of fake time."""
    end = clock.now() + seconds
    while clock.now() < end:
        clock.advance(d.cfg.pool_interval)
        d.tick()


# ---- configuration ------------------------------------------------------------------------

def test_config_defaults_are_upstreams_and_scale():
    cfg = from_env({"CNIKIT_TIME_SCALE": "0.1"})
    assert (cfg.warm_eni_target, cfg.warm_ip_target, cfg.minimum_ip_target) == (1, 0, 0)
    assert cfg.profile == "hardened" and cfg.imds_endpoint == "http://169.254.169.254"
    assert cfg.pool_interval == pytest.approx(0.5) and cfg.reconcile_interval == pytest.approx(6)
    assert cfg.decrease_interval == pytest.approx(3) and cfg.ip_cooldown_scaled == pytest.approx(3)


@pytest.mark.parametrize("env,msg", [
    ({"WARM_IP_TARGET": "x"}, "WARM_IP_TARGET"),
    ({"CNIKIT_PROFILE": "nope"}, "CNIKIT_PROFILE"),
    ({"ENABLE_PREFIX_DELEGATION": "maybe"}, "ENABLE_PREFIX_DELEGATION"),
    ({"MAX_ENI": "0"}, "MAX_ENI"),
])
def test_config_rejects_bad_values_in_one_line(env, msg):
    with pytest.raises(UsageError) as e:
        from_env(env)
    assert msg in str(e.value) and "\n" not in str(e.value)


# ---- pool ---------------------------------------------------------------------------------

def test_startup_fills_warm_eni_target():
    d, ec2, *_ = make()
    s = d.ds.stats()
    assert s.enis == 1 and s.total == 9 and s.assigned == 0
    assert d.within_targets()


def test_pool_grows_an_eni_at_next_device_index_and_tags_it():
    d, ec2, _, clock, _ = make()
    for n in range(9):
        d.add(key(n))
    settle(d, clock, 10)
    assert d.ds.stats().enis == 2
    new = [e for e in ec2.enis.values() if e.device_index == 1]
    assert len(new) == 1 and new[0].tags[TAG_INSTANCE] == ec2.instance_id
    assert len(new[0].secondary_ips) == 9 and d.within_targets()


def test_pool_shrinks_after_cooldown_and_frees_the_eni():
    d, ec2, _, clock, _ = make()
    for n in range(12):
        d.add(key(n))
    settle(d, clock, 10)
    # 12 held of 18 leaves 6 free, under one ENI's worth (9): a third ENI.
    assert d.ds.stats().enis == 3
    for n in range(12):
        d.delete(key(n))
    # Nothing goes while IPs cool down (30 s) and the new ENIs are young (60 s).
    clock.advance(5)
    d.tick()
    assert d.ds.stats().enis == 3
    settle(d, clock, 120)
    assert d.ds.stats().enis == 1 and len([e for e in ec2.enis.values() if e.instance_id]) == 1
    assert d.within_targets()


def test_warm_ip_and_minimum_targets():
    d, ec2, _, clock, _ = make(warm_ip_target=2, minimum_ip_target=4)
    assert d.ds.stats().total == 4
    for n in range(5):
        d.add(key(n))
    settle(d, clock, 10)
    s = d.ds.stats()
    assert s.available == 2 and s.total == 7 and d.within_targets()
    for n in range(5):
        d.delete(key(n))
    settle(d, clock, 31)  # past the cooldown: one decrease at most every 30 s
    s = d.ds.stats()
    assert s.total == 4 and d.within_targets()
    assert len(ec2.primary.secondary_ips) == 4


def test_decrease_waits_30s_between_steps():
    d, ec2, _, clock, _ = make(warm_ip_target=1)
    for n in range(6):
        d.add(key(n))
    settle(d, clock, 10)
    d.delete(key(0))
    d.delete(key(1))
    clock.advance(31)
    d.tick()
    first = d.last_decrease
    d.delete(key(2))
    clock.advance(31)
    d.tick()
    assert d.last_decrease - first >= d.cfg.decrease_interval


def test_max_eni_caps_the_pool():
    d, ec2, _, clock, _ = make(max_eni=1)
    for n in range(9):
        d.add(key(n))
    with pytest.raises(NoAvailableIP):
        d.add(key(99))
    assert d.ds.stats().enis == 1
    assert d.metrics.get("awscni_ipamd_error_count", fn="increaseIPPoolMaxENI") >= 1


def test_ec2_failure_changes_nothing_and_counts_an_error():
    d, ec2, _, clock, _ = make(warm_ip_target=1)
    d.add(key(0))
    ec2.fail["assign_ips"] = "RequestLimitExceeded"
    before = d.ds.stats()
    clock.advance(5)
    d.tick()
    assert d.ds.stats() == before
    assert d.metrics.get("awscni_aws_api_error_count", api="assign_ips", error="RequestLimitExceeded") == 1
    del ec2.fail["assign_ips"]
    d.tick()
    assert d.ds.stats().available == 1


# ---- datastore: ADD/DEL, cooldown ---------------------------------------------------------

def test_add_is_idempotent_and_del_tolerates_gone():
    d, *_ = make()
    a = d.add(key(1))
    assert d.add(key(1)) == a and d.check(key(1)) == a
    assert d.delete(key(1)).ip == a.ip
    assert d.delete(key(1)) is None and d.check(key(1)) is None


def test_freed_ip_cools_down_before_reuse():
    d, ec2, _, clock, _ = make(warm_ip_target=1, minimum_ip_target=1)
    a = d.add(key(1))
    d.delete(key(1))
    settle(d, clock, 5)
    b = d.add(key(2))
    assert b.ip != a.ip, "an IP freed 5 s ago was handed out again (upstream issue 1091)"
    d.delete(key(2))
    clock.advance(31)
    # Out of cooldown: the IP is either free again or released to EC2, never lost.
    assert (a.ip in d.ds.enis[ec2.primary.eni_id].ips()) == (a.ip in ec2.all_ips())


def test_no_two_sandboxes_share_an_ip_under_churn():
    import random

    seed = 5
    print(f"seed={seed}")
    rng = random.Random(seed)
    d, ec2, _, clock, _ = make(warm_ip_target=2)
    live: dict[int, str] = {}
    for step in range(400):
        if live and rng.random() < 0.45:
            n = rng.choice(list(live))
            d.delete(key(n))
            del live[n]
        else:
            n = step
            try:
                live[n] = d.add(key(n)).ip
            except NoAvailableIP:
                pass
        if step % 7 == 0:
            clock.advance(d.cfg.pool_interval)
            d.tick()
        assert len(set(live.values())) == len(live)
        for n, ip in live.items():
            assert d.check(key(n)).ip == ip
            assert ip in ec2.all_ips()


# ---- checkpoint and recovery --------------------------------------------------------------

def test_checkpoint_file_round_trip_in_upstream_format(tmp_path):
    path = tmp_path / "ipam.json"
    d, ec2, imds, clock, _ = make(ckpt=JsonCheckpoint(path))
    a = d.add(key(1), {"k8sPodNamespace": "default", "k8sPodName": "p1"})
    doc = json.loads(path.read_text())
    assert doc["version"] == FORMAT_VERSION == "vpc-cni-ipam/1"
    (row,) = doc["allocations"]
    assert row["containerID"] == "sandbox-1" and row["ifName"] == "eth0" and row["ipv4"] == a.ip
    assert row["networkName"] == "aws-cni" and row["metadata"]["k8sPodName"] == "p1"
    assert isinstance(row["allocationTimestamp"], int)
    assert [p.name for p in tmp_path.iterdir()] == ["ipam.json"], "temp file left behind"
    d.delete(key(1))
    assert json.loads(path.read_text())["allocations"] == []


def test_checkpoint_rejects_garbage(tmp_path):
    path = tmp_path / "ipam.json"
    path.write_text("{not json")
    with pytest.raises(CheckpointError):
        JsonCheckpoint(path).read()
    path.write_text(json.dumps({"version": "other/9", "allocations": []}))
    with pytest.raises(CheckpointError):
        JsonCheckpoint(path).read()
    assert JsonCheckpoint(tmp_path / "missing.json").read() == []


def test_failed_checkpoint_write_undoes_the_assignment():
    d, _, _, _, ckpt = make()
    ckpt.fail = True
    with pytest.raises(OSError):
        d.add(key(1))
    assert d.check(key(1)) is None and d.ds.stats().assigned == 0
    ckpt.fail = False
    a = d.add(key(1))
    ckpt.fail = True
    with pytest.raises(OSError):
        d.delete(key(1))
    assert d.check(key(1)) == a


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


# ---- reconcile: upstream issue 3019 -------------------------------------------------------

def three_views_3019(profile):
    """EC2: [P, a, b, d]. IMDS (stale): [P, a, b, c]. Datastore: a, b, d all held by pods.

    c was released by the daemon more than 60 s ago, d was assigned after IMDS went stale.
    The lengths agree (1 + 3 == 4) while the contents do not.
    """
    d, ec2, imds, clock, _ = make(profile, instance_type="t3.small", max_eni=1)
    eni = ec2.primary.eni_id
    assert len(d.ds.enis[eni].ips()) == 3
    imds.freeze(eni)
    c = d.ds.enis[eni].ips()[-1]
    d._release(eni, [f"{c}/32"])
    clock.advance(61)  # c leaves the reconcile cooldown
    assert d._assign_on(eni, 1) == 1
    holders = {n: d.add(key(n)).ip for n in range(3)}
    new_ip = next(ip for ip in holders.values() if ip not in imds.frozen[eni].ips)
    truth = ec2.enis[eni].ips
    stale = [v for v in imds.enis() if v.eni_id == eni][0].ips
    assert len(truth) == len(stale) and set(truth) != set(stale)
    assert 1 + len(d.ds.enis[eni].ips()) == len(stale)
    return d, ec2, imds, clock, holders, new_ip


@pytest.mark.parametrize("profile", PROFILES)
def test_issue_3019_stale_imds_with_equal_lengths(profile):
    d, ec2, imds, clock, holders, new_ip = three_views_3019(profile)
    holder = next(n for n, ip in holders.items() if ip == new_ip)
    d.reconcile()
    if profile == "vpc-cni-1.18.3":
        assert d.check(key(holder)) is None, "1.18.3 should drop the in-use IP"
        assert d.metrics.total("awscni_force_removed_ips") == 1
        # Once IMDS catches up the IP comes back as free and goes to a second pod.
        imds.thaw()
        clock.advance(61)
        d.reconcile()
        second = d.add(key(50))
        assert second.ip == new_ip, "the dropped IP should be handed out again"
    else:
        assert d.check(key(holder)).ip == new_ip
        assert d.metrics.total("awscni_force_removed_ips") == 0
        assert all(d.check(key(n)).ip == ip for n, ip in holders.items())


@pytest.mark.parametrize("profile", PROFILES)
def test_recently_freed_ip_handed_straight_back(profile):
    """EC2 re-assigns an IP the daemon released seconds ago and a pod takes it. Upstream never
    clears its reconcile cooldown cache on a re-assign, so within the 60 s the reconcile skips
    the IP as "recently freed" and then sweeps it although a pod holds it (both upstream
    profiles); hardened keeps it."""
    d, ec2, imds, clock, _ = make(profile, instance_type="t3.small", max_eni=1, warm_ip_target=1)
    ec2.reuse_freed = True
    held = {n: d.add(key(n)).ip for n in range(2)}
    settle(d, clock, 5)
    d.delete(key(0))
    settle(d, clock, 35)  # out of IP cooldown, then released (over WARM_IP_TARGET)
    assert held[0] not in ec2.all_ips()
    again = d.add(key(9))
    settle(d, clock, 5)
    if again.ip != held[0]:
        again = d.add(key(10))
    assert again.ip == held[0], "EC2 should hand the released IP back"
    clock.advance(1)  # well within the 60 s reconcile cooldown of the release
    d.reconcile()
    if profile == "hardened":
        assert d.check(again.key) == again
    else:
        assert d.check(again.key) is None


# ---- reconcile: an ENI missing from IMDS (1967), stale IMDS at start-up (3887) ------------

@pytest.mark.parametrize("profile", PROFILES)
def test_eni_missing_from_imds(profile):
    d, ec2, imds, clock, _ = make(profile)
    held = {n: d.add(key(n)) for n in range(12)}
    second = next(a for a in held.values() if a.device_number == 1)
    imds.hide(second.eni_id)
    clock.advance(61)
    d.reconcile()
    if profile == "hardened":
        assert d.check(second.key) == second and second.eni_id in d.ds.enis
    else:
        assert d.check(second.key) is None and second.eni_id not in d.ds.enis


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


def test_hardened_ignores_a_lagging_describe_for_ips_it_released():
    """EC2's Describe is eventually consistent. Past the 60 s reconcile cooldown, a Describe
    that still shows an IP the daemon released must not bring it back to the pool: EC2
    may already have given it to another node. Hardened adds only what IMDS shows too."""
    d, ec2, imds, clock, _ = make("hardened", instance_type="t3.small", max_eni=1,
                                  warm_ip_target=1)
    held = {n: d.add(key(n)).ip for n in range(2)}
    settle(d, clock, 5)
    before = ec2.describe_enis(ec2.instance_id)  # the state a lagging Describe keeps showing
    d.delete(key(0))
    settle(d, clock, 35)  # out of IP cooldown, then released (over WARM_IP_TARGET)
    assert held[0] not in ec2.all_ips()
    ec2.describe_enis = lambda instance_id: copy.deepcopy(before)
    clock.advance(61)  # past the reconcile cooldown of the release
    for _ in range(reconcile.HARDENED_FULL_CHECK_EVERY):  # at least one full EC2 check
        d.reconcile()
    assert held[0] not in d.ds.enis[ec2.primary.eni_id].ips()
    assert held[0] not in {d.add(key(n)).ip for n in range(10, 12)}  # the ENI has room for 2


def test_hardened_ignores_a_lagging_describe_for_an_eni_it_freed():
    d, ec2, imds, clock, _ = make("hardened")
    for n in range(12):
        d.add(key(n))
    settle(d, clock, 10)
    before = ec2.describe_enis(ec2.instance_id)  # three ENIs attached
    for n in range(12):
        d.delete(key(n))
    settle(d, clock, 120)
    assert d.ds.stats().enis == 1
    ec2.describe_enis = lambda instance_id: copy.deepcopy(before)
    for _ in range(reconcile.HARDENED_FULL_CHECK_EVERY):
        clock.advance(61)
        d.reconcile()
    assert d.ds.stats().enis == 1, "a freed ENI came back from a lagging Describe"


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


def test_hardened_keeps_an_ip_ec2_took_back_for_its_pod_only():
    d, ec2, imds, clock, _ = make("hardened", warm_ip_target=1)
    a = d.add(key(1))
    ec2.take_back(a.eni_id, a.ip)
    clock.advance(61)
    d.reconcile()
    assert d.check(key(1)) == a
    d.delete(key(1))
    others = [d.add(key(n)).ip for n in range(2, 6)]
    assert a.ip not in others, "an IP EC2 took back was handed to another pod"
    clock.advance(61)
    d.reconcile()
    assert a.ip not in d.ds.enis[a.eni_id].ips()


@pytest.mark.parametrize("profile", PROFILES)
def test_imds_errors_change_nothing(profile):
    d, ec2, imds, clock, _ = make(profile)
    a = d.add(key(1))
    imds.fail = True
    clock.advance(61)
    d.tick()
    assert d.check(key(1)) == a
    assert d.metrics.get("awscni_ipamd_error_count", fn="reconcileFailedGetENIs") == 1


# ---- prefix delegation --------------------------------------------------------------------

def test_prefix_delegation_pool_and_pods():
    d, ec2, imds, clock, _ = make(prefix_delegation=True, warm_prefix_target=1)
    assert d.ds.stats().prefixes == 1 and d.ds.stats().total == 16
    ips = [d.add(key(n)).ip for n in range(17)]
    assert len(set(ips)) == 17
    settle(d, clock, 10)
    assert d.ds.stats().prefixes == 3 and d.within_targets()
    assert ec2.primary.prefixes == d.ds.enis[ec2.primary.eni_id].prefixes()


@pytest.mark.parametrize("profile", PROFILES)
def test_partial_prefix_read(profile):
    """IMDS shows one prefix too few and one stale one (lengths equal): issue 3824's class."""
    d, ec2, imds, clock, _ = make(profile, prefix_delegation=True, warm_prefix_target=1)
    eni = ec2.primary.eni_id
    a = d.add(key(1))
    held_prefix = d.ds.enis[eni].prefixes()[0]
    imds.override(eni, prefixes=["10.0.1.240/28"])
    clock.advance(61)
    d.reconcile()
    if profile == "vpc-cni-1.18.3":
        assert d.check(key(1)) is None and held_prefix not in d.ds.enis[eni].prefixes()
    else:
        assert d.check(key(1)) == a


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


def test_attach_failure_rolls_back_and_leaked_enis_are_cleaned():
    d, ec2, imds, clock, _ = make()
    ec2.fail["attach_eni"] = "AttachmentLimitExceeded"
    ec2.fail["delete_eni"] = "RequestLimitExceeded"
    for n in range(9):
        d.add(key(n))
    settle(d, clock, 10)
    leaked = [e for e in ec2.enis.values() if not e.instance_id]
    assert leaked and d.ds.stats().enis == 1
    del ec2.fail["attach_eni"], ec2.fail["delete_eni"]
    settle(d, clock, 10 * d.cfg.reconcile_interval + 5)
    assert not [e for e in ec2.enis.values() if not e.instance_id], "leaked ENIs stay behind"
    assert d.ds.stats().enis == 2 and d.within_targets()


# ---- the socket API's ADD -----------------------------------------------------------------

def test_add_on_a_secondary_eni_waits_for_the_subnet_when_imds_failed_at_start(tmp_path):
    """A daemon started while IMDS failed does not know the subnet, so it cannot make a
    secondary ENI's route table: an ADD landing there fails with "try again" and gives the
    IP back (instead of wiring a pod that cannot route), and IMDS is asked again later."""
    from cnikit.daemon.server import CNI_TRY_AGAIN, Daemon

    ec2 = FakeEc2()
    imds = FakeImds(ec2)
    imds.fail = True
    d = IpamD(Config(profile="hardened"), ec2, imds, FakeClock(), MemoryCheckpoint())
    d.start()
    assert d.subnet_cidr == ""
    for n in range(9):  # the primary ENI's secondary IPs, so the next pod lands on eth1
        d.add(key(n))
    settle(d, d.clock, 10)
    daemon = Daemon(d, tmp_path, pool_interval=1.0)
    req = {"cmd": "add", "network": "aws-cni", "containerID": "sandbox-99", "ifName": "eth0",
           "netns": "/run/netns/ck-nope0-n0-p99"}
    answer = daemon.handle(req)
    assert answer["ok"] is False and answer["code"] == CNI_TRY_AGAIN, answer
    assert "subnet" in answer["error"] and d.check(key(99)) is None
    imds.fail = False
    assert d.known_subnet_cidr() == str(ec2.subnet)


def test_stop_wakes_its_servers_instead_of_waiting_out_their_poll(tmp_path, monkeypatch):
    import socket
    import threading

    from cnikit.daemon import server

    # A poll no test would wait for: stop() must return because it woke each server.
    monkeypatch.setattr(server, "SERVE_POLL", 3600)
    d, *_ = make()
    daemon = server.Daemon(d, tmp_path, pool_interval=3600)
    daemon.serve(("127.0.0.1", 0), ("0.0.0.0", 0))
    ports = [s.server_address[1] for s in daemon._servers[1:]]
    assert len(ports) == 2
    stopper = threading.Thread(target=daemon.stop, daemon=True)
    stopper.start()
    stopper.join(30)
    assert not stopper.is_alive(), "stop() waited for a server's poll"
    assert not daemon.socket_path.exists()
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.mark.parametrize("profile", PROFILES)
def test_an_add_growing_the_pool_during_the_imds_read_is_not_reconciled_against_it(profile,
                                                                                  tmp_path):
    from cnikit.daemon import server

    d, ec2, imds, clock, _ = make(profile, instance_type="t3.small")
    daemon = server.Daemon(d, tmp_path, pool_interval=3600)
    read = imds.enis
    added = []

    def read_while_pods_come():
        # The pool manager reads IMDS without the lock; CNI ADDs (under it) go on meanwhile,
        # until one finds the pool empty and attaches an ENI (which reads IMDS itself).
        imds.enis = read
        view = read()
        enis = len(d.ds.enis)
        while len(d.ds.enis) == enis:
            added.append(key(len(added)))
            with daemon.lock:
                d.add(added[-1])
        return view

    imds.enis = read_while_pods_come
    clock.advance(d.cfg.reconcile_interval)
    assert d.reconcile_due()
    daemon.pool_pass()
    assert all(d.check(k) for k in added), "a pod's IP was reconciled away"
    assert not [e for e in d.events if e["kind"] == "reconcile-eni-del"]
    # The next pass reads IMDS afresh and reconciles (the ENI is there now).
    runs = d.reconcile_runs
    daemon.pool_pass()
    assert d.reconcile_runs == runs + 1 and all(d.check(k) for k in added)
