"""The warm pool on a fake clock: it fills to its targets at start, grows an ENI at a time,
shrinks after the cooldown, keeps to MAX_ENI, and an EC2 failure changes nothing."""

from __future__ import annotations

import pytest

from cnikit.daemon.checkpoint import (
    MemoryCheckpoint,
)
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config
from cnikit.daemon.datastore import NoAvailableIP
from cnikit.daemon.fakes import FakeEc2, FakeImds
from cnikit.daemon.ipamd import TAG_INSTANCE, IpamD
from tests.unit.daemon_support import key, make, settle


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


def test_add_on_a_secondary_eni_waits_for_the_subnet_when_imds_failed_at_start(tmp_path):
    """A daemon started while IMDS failed does not know the subnet, so it cannot make a
    secondary ENI's route table: an ADD landing there fails with "try again" and gives the
    IP back (instead of wiring a pod that cannot route), and IMDS is asked again later."""
    from cnikit.daemon.server import CNI_TRY_AGAIN, Daemon

    ec2 = FakeEc2()
    imds = FakeImds(ec2)
    imds.fail = True
    # Without subnet discovery: with it, DescribeSubnets names the new ENI's subnet.
    d = IpamD(Config(profile="hardened", subnet_discovery=False), ec2, imds, FakeClock(),
              MemoryCheckpoint())
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


def test_prefix_delegation_pool_and_pods():
    d, ec2, imds, clock, _ = make(prefix_delegation=True, warm_prefix_target=1)
    assert d.ds.stats().prefixes == 1 and d.ds.stats().total == 16
    ips = [d.add(key(n)).ip for n in range(17)]
    assert len(set(ips)) == 17
    settle(d, clock, 10)
    assert d.ds.stats().prefixes == 3 and d.within_targets()
    assert ec2.primary.prefixes == d.ds.enis[ec2.primary.eni_id].prefixes()


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
