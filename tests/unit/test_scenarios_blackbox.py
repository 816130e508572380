"""What the scenarios know of a build from outside (cnikit.scenarios.blackbox) and the verdict
rules of the engine: no root, no cluster. The runs themselves are in tests/scenarios."""

from __future__ import annotations

import pytest

from cnikit.check.history import History
from cnikit.cloud.limits import FALLBACK
from cnikit.cloud.ownership import EniInfo
from cnikit.daemon.checkpoint import MemoryCheckpoint
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config
from cnikit.daemon.datastore import IpamKey
from cnikit.daemon.fakes import FakeEc2, FakeImds
from cnikit.daemon.ipamd import IpamD
from cnikit.daemon.server import PRIVATE_STATUS_ENV, Daemon
from cnikit.scenarios import blackbox
from cnikit.scenarios.engine import Liveness, Precondition, RunResult, ScenarioFailed
from cnikit.scenarios.engine.verdict import judge as _judge

MACS = "/latest/meta-data/network/interfaces/macs/"
M5 = FALLBACK["m5.large"]


def req(path, status=200, body="", **kw):
    return {"method": "GET", "path": path, "status": status, "body": body, **kw}


def listing(*macs, status=200, version="latest", **kw):
    return req(MACS.replace("latest", version), status, "\n".join(f"{m}/" for m in macs), **kw)


def addresses(mac, entry="local-ipv4s", status=200, version="latest", **kw):
    return req(f"{MACS}{mac}/{entry}".replace("latest", version, 1), status, **kw)


# ---- a reconcile pass, from the IMDS request log ----------------------------------------------

def test_a_full_read_is_the_list_then_every_listed_enis_addresses():
    log = [listing("a", "b"), addresses("a"), req(f"{MACS}a/subnet-ipv4-cidr-block"),
           addresses("b", "ipv4-prefix", status=404)]
    assert blackbox.eni_list_reads(log) == 1
    assert blackbox.eni_list_reads(log[:-1]) == 0  # b never read: no pass


def test_reads_under_any_api_version_count():
    log = [listing("a", version="2021-03-23"), addresses("a", version="2021-03-23")]
    assert blackbox.eni_list_reads(log) == 1


def test_failed_lists_are_attempts_not_reads():
    log = [listing("a", status=500), addresses("a"), listing("a", status=0)]
    assert blackbox.eni_list_reads(log) == 0
    assert blackbox.eni_list_reads(log, attempts=True) == 2


def test_the_kits_own_reads_never_complete_a_nodes_read():
    log = [listing("a", "b"), addresses("a"), addresses("b", observer=True)]
    assert blackbox.eni_list_reads(log) == 0
    assert blackbox.eni_list_reads([listing("a", observer=True), addresses("a")]) == 0


def test_interleaved_reads_each_count_once():
    log = [listing("a", "b"), addresses("a"), listing("a", "b"), addresses("b"), addresses("a"),
           addresses("b")]
    assert blackbox.eni_list_reads(log) == 2


def test_a_log_fed_a_page_at_a_time_counts_as_the_whole():
    log = [listing("a", "b"), addresses("a"), listing("a", "b"), addresses("b"), addresses("a"),
           addresses("b"), listing("a", status=500), listing("a"), addresses("a")]
    for cut in range(len(log) + 1):
        for attempts in (False, True):
            reads = blackbox.EniListReads(attempts)
            reads.feed(log[:cut])
            assert reads.feed(log[cut:]) == blackbox.eni_list_reads(log, attempts)


# ---- a warm pool, from EC2's view ---------------------------------------------------------

def eni(i, ips=(), prefixes=(), device=0):
    primary = f"10.0.{i}.4"
    return EniInfo(f"eni-{i}", "i-1", device, f"02:00:00:00:00:0{i}", primary, "subnet-1",
                   [primary, *ips], list(prefixes))


def test_free_is_secondary_addresses_minus_the_pods_ips():
    enis = [eni(1, ["10.0.1.5", "10.0.1.6", "10.0.1.7"])]
    v = blackbox.pool_view(enis, {"10.0.1.5", "10.0.9.9"}, M5)
    assert (v.enis, v.secondary, v.held, v.free, v.full) == (1, 3, 1, 2, False)


@pytest.mark.parametrize("env, free_ips, met", [
    ({"WARM_IP_TARGET": "2"}, 2, True),
    ({"WARM_IP_TARGET": "2"}, 1, False),
    ({"MINIMUM_IP_TARGET": "5"}, 4, False),
    ({}, 9, True),  # WARM_ENI_TARGET=1 on m5.large: an ENI's 9 secondary IPs free
    ({}, 8, False),
    ({"WARM_ENI_TARGET": "0", "WARM_IP_TARGET": "1"}, 1, True),
])
def test_warm_targets_follow_upstreams_variables(env, free_ips, met):
    ips = [f"10.0.1.{10 + n}" for n in range(free_ips)]
    v = blackbox.pool_view([eni(1, ips)], set(), M5)
    assert blackbox.warm_target_met(v, env, "m5.large") is met


def test_a_node_that_cannot_grow_is_at_its_targets():
    full = [f"10.0.1.{10 + n}" for n in range(M5.ipv4_per_eni - 1)]
    v = blackbox.pool_view([eni(1, full)], set(full), M5)  # every IP held, MAX_ENI=1
    assert v.free == 0 and blackbox.warm_target_met(v, {"MAX_ENI": "1", "WARM_IP_TARGET": "1"},
                                                      "m5.large")
    assert not blackbox.warm_target_met(v, {"WARM_IP_TARGET": "1"}, "m5.large")


def test_prefix_delegation_counts_whole_free_prefixes():
    pd = {"ENABLE_PREFIX_DELEGATION": "true", "WARM_PREFIX_TARGET": "1"}
    one = [eni(1, prefixes=["10.0.1.16/28"])]
    assert blackbox.pool_view(one, set(), M5).secondary == 16
    assert blackbox.warm_target_met(blackbox.pool_view(one, set(), M5), pd, "m5.large")
    assert not blackbox.warm_target_met(blackbox.pool_view(one, {"10.0.1.17"}, M5), pd, "m5.large")


# ---- the [observe] introspection port's JSON ------------------------------------------------

def test_upstreams_enis_json_gives_addresses_and_holders():
    ec2 = FakeEc2()
    d = IpamD(Config(profile="hardened"), ec2, FakeImds(ec2), FakeClock(), MemoryCheckpoint())
    d.start()
    d.pool_step()
    a = d.add(IpamKey("aws-cni", "sandbox-1", "eth0"), {})
    enis, held = blackbox.enis_view(d.ds.introspect())
    assert held == {a.ip: "sandbox-1"}
    assert a.ip in enis[a.eni_id] and all("/" not in ip for ip in enis[a.eni_id])


# ---- the private status API can be switched off -------------------------------------------

def test_private_status_off_refuses_status(tmp_path, monkeypatch):
    ec2 = FakeEc2()
    d = IpamD(Config(profile="hardened"), ec2, FakeImds(ec2), FakeClock(), MemoryCheckpoint())
    d.start()
    daemon = Daemon(d, tmp_path, pool_interval=1.0)
    assert daemon.handle({"cmd": "status"})["ok"] is True
    monkeypatch.setenv(PRIVATE_STATUS_ENV, "off")
    answer = daemon.handle({"cmd": "status"})
    assert answer["ok"] is False and PRIVATE_STATUS_ENV in answer["error"]
    assert daemon.handle({"cmd": "ping"})["ok"] is True


def test_every_scenario_run_switches_it_off():
    from cnikit.scenarios.engine import BASE_ENV

    assert BASE_ENV.get(PRIVATE_STATUS_ENV) == "off"


# ---- verdicts ---------------------------------------------------------------------------------

def result():
    return RunResult("s", "d", "t", 1, "error", "holds", 0.0, 0.0)


def test_preconditions_and_liveness_are_scenario_failures_apart_from_kit_errors():
    assert issubclass(Precondition, ScenarioFailed) and issubclass(Liveness, ScenarioFailed)
    rec = Liveness("node 0", "a pod got no IP within 10s", {"last CNI error": "boom"}).record()
    assert rec["kind"] == "liveness" and rec["severity"] == "violation"
    assert rec["detail"]["evidence"] == {"last CNI error": "boom"}


@pytest.mark.parametrize("error, precondition, liveness, verdict, exercised", [
    (None, None, False, "holds", True),
    ("kit broke", None, False, "error", False),
    (None, "warm pool", False, "inconclusive", False),
    (None, "warm pool", True, "violation", True),
    ("kit broke", None, True, "violation", True),
])
def test_judge_orders_violation_inconclusive_error_holds(error, precondition, liveness, verdict,
                                                          exercised):
    r = result()
    r.error, r.precondition = error, precondition
    found = [Liveness("daemon", "never ready").record()] if liveness else []
    _judge(r, None, History(), found)
    assert (r.verdict, r.exercised) == (verdict, exercised)
    if liveness:
        assert r.violations[0]["kind"] == "liveness" and "never ready" in r.evidence()[0]


def test_no_view_of_the_pool_no_leak_warning():
    """A warm address cannot be told from a leak without the build's own view ([observe]):
    addresses EC2 gives a node nobody holds are leak warnings only where the kit sees it."""
    from cnikit.check.invariants import Invariants

    h, inv = History(), Invariants(leak_grace=5)
    h.subscribe(inv.step)
    t0 = 1000.0
    h.info("monitor", "ownership", {"full": True, "set": {"10.0.1.9": ["i-1", "eni", False],
                                                          "10.0.2.9": ["i-2", "eni", False]}},
           at=t0)
    h.info("monitor", "daemon-view", {"instance_id": "i-2", "ips": []}, at=t0 + 1)
    h.info("prober", "stats", {"stale": []}, at=t0 + 10)
    assert [w.subject for w in inv.warnings("leak")] == ["10.0.2.9"]


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5078\r\n\r\n{\"ENIs\"",  # stopped mid-answer
    b"garbage\r\n\r\n",
])
def test_an_introspection_answer_cut_short_is_an_oserror(answer):
    import os
    import socket
    import threading

    if os.geteuid() != 0:
        pytest.skip("entering a network namespace needs root")
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        # The sampler records an OSError as "daemon-view-error"; anything else killed it.
        with pytest.raises(OSError, match="/v1/enis"):
            blackbox.introspect("/proc/self/ns/net", srv.getsockname()[1])
    finally:
        t.join(10)
        srv.close()
