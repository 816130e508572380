"""The periodic reconcile of the datastore against EC2 and IMDS, per profile: upstream 3019 (a
stale IMDS with equal lengths) on a fake clock and end to end with real daemon processes, an
ENI missing from IMDS, IMDS errors, partial prefix reads, a lagging Describe."""

from __future__ import annotations

import copy

import pytest

from cnikit.cluster import ec2_ips_of
from cnikit.daemon import reconcile
from cnikit.daemon.checkpoint import (
    MemoryCheckpoint,
)
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.fakes import FakeEc2, FakeImds
from cnikit.daemon.imds_http import HttpImds
from cnikit.daemon.process import DaemonProcess
from cnikit.daemon.server import request
from tests.unit.daemon_support import PROFILES, key, lag_describe, make, on_disk, settle, start
from tests.waiting import wait_for


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


@pytest.fixture(scope="module")
def world():
    from cnikit.cloud import Cloud
    from fault_imds.client import FaultClient
    from fault_imds.server import ImdsServer

    cloud = Cloud.start(ec2="moto")
    topo = cloud.bootstrap(nodes=len(PROFILES) + 1, instance_type="m5.large")
    imds = ImdsServer(ec2_endpoint=cloud.endpoint).start()
    yield cloud, topo, imds, FaultClient(imds.control_url)
    imds.stop()
    cloud.stop()


def call(d, cmd, cid):
    return request(d.socket_path, {"cmd": cmd, "network": "aws-cni", "containerID": cid, "ifName": "eth0"})


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_issue_3019_end_to_end(world, tmp_path, profile):
    cloud, topo, imds, faults = world
    inst = topo.instances[PROFILES.index(profile)]
    d = DaemonProcess(tmp_path / "state", env={
        "AWS_ENDPOINT_URL_EC2": cloud.endpoint, "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
        "CNIKIT_INSTANCE_ID": inst.instance_id, "CNIKIT_PROFILE": profile,
        "CNIKIT_TIME_SCALE": "0.05", "WARM_IP_TARGET": "1", "MAX_ENI": "1",
        "CNIKIT_METRICS_ADDR": "off", "CNIKIT_INTROSPECTION_ADDR": "off",
    }).start()
    try:
        ips = {f"pod{i}": call(d, "add", f"pod{i}")["ip"] for i in range(1, 9)}
        wait_for(lambda: request(d.socket_path, {"cmd": "status"})["stats"]["total"] == 9, 10,
                 "a full ENI (9 secondary IPs)")
        eni = ec2_ips_of(cloud.gate.owners(), inst.instance_id)[ips["pod1"]][0]
        mac = cloud.gate.owners().enis[eni].mac
        view = HttpImds(imds.url, inst.instance_id)
        # Freeze IMDS only once it shows the full ENI: [P, ip1..ip9].
        wait_for(lambda: [len(v.ips) for v in view.enis() if v.mac == mac] == [10], 10,
                 "IMDS to show the full ENI")
        with faults.stale(mac=mac):
            call(d, "del", "pod1")
            # ip1 cools down, then the pool releases it to EC2 (WARM_IP_TARGET=1 is exceeded).
            wait_for(lambda: ips["pod1"] not in cloud.gate.owners().enis[eni].ips, 15,
                     "ip1 released to EC2")
            other = topo.instances[-1].primary_eni_id
            cloud.client().assign_private_ip_addresses(NetworkInterfaceId=other,
                                                       PrivateIpAddresses=[ips["pod1"]])
            ips["pod9"] = call(d, "add", "pod9")["ip"]
            new = call(d, "add", "pod10")
            assert new["ok"], new
            ips["pod10"] = new["ip"]
            assert ips["pod10"] in cloud.gate.owners().enis[eni].ips
            assert ips["pod10"] != ips["pod1"]
            start = request(d.socket_path, {"cmd": "status"})["reconciles"]
            wait_for(lambda: request(d.socket_path, {"cmd": "status"})["reconciles"] >= start + 2, 15,
                     "two reconciles with IMDS stale")
            held = call(d, "check", "pod10")
            events = request(d.socket_path, {"cmd": "status"})["events"]
        if profile == "vpc-cni-1.18.3":
            assert not held["ok"], "1.18.3 should have dropped pod10's in-use IP"
        else:
            assert held["ok"] and held["ip"] == ips["pod10"], (ips, events, d.tail(20))
            for name in ("pod2", "pod9"):
                assert call(d, "check", name)["ip"] == ips[name]
    finally:
        d.stop()


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
def test_imds_errors_change_nothing(profile):
    d, ec2, imds, clock, _ = make(profile)
    a = d.add(key(1))
    imds.fail = True
    clock.advance(61)
    d.tick()
    assert d.check(key(1)) == a
    assert d.metrics.get("awscni_ipamd_error_count", fn="reconcileFailedGetENIs") == 1


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


def test_an_eni_the_reconcile_takes_back_brings_only_what_imds_shows_too(tmp_path):
    """IMDS hid an ENI at restart (so it was left out); when IMDS shows it again, a
    lagging Describe still lists an address released from it before the restart."""
    d, ec2, imds, clock, ckpt = on_disk(tmp_path)
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
